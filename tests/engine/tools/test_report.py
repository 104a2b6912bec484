"""`report`: every figure a decodable, non-blank PNG with its axis labels named in the page; the Figure 6 view,
diversity, rejection reasons; best and worst environments linking to their code and a transcript; a bad record
named, not fatal; and the page rendered by headless Chromium (skipped, saying why, without it)."""

from __future__ import annotations

from engine.cli import main
from engine.tools.report import probe_figure, time_figure, write_report
from storage.store import Store

from report_checks import assert_not_blank, check_report, screenshot
from run_builder import ENV_A, ENV_B


def test_the_report_of_a_small_run(small_run):
    page = open(write_report(small_run.paths)).read()
    check_report(page)
    assert "Best and worst environments (by designer reward)" in page
    best = page[page.index("<h3>best</h3>"): page.index("<h3>worst</h3>")]
    worst = page[page.index("<h3>worst</h3>"): page.index("<h2 id='environments'>")]
    assert f"#env-{ENV_A}" in best and f"#env-{ENV_B}" not in best and f"#env-{ENV_B}" in worst  # reward 1.0 over 0.0
    assert f"<section id='env-{ENV_A}'>" in page and "class PickEnv:" in page
    key = f"00000000-p-{ENV_A}-no_hint-0"
    assert f"href='#traj-{key}'" in page and f"<section id='traj-{key}'>" in page


def test_a_bad_record_is_listed_and_the_report_still_written_and_the_command_fails(small_run, capsys):
    store = Store.open(small_run.paths.store)
    with store._env.begin(write=True) as txn:
        txn.put(b"zz-broken", b"\x93oops", db=store._dbs["designer_rewards"])
    store.close()
    assert main(["report", str(small_run.paths.root)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "record 'zz-broken' in database 'designer_rewards' is corrupt" in err, err
    assert f"(the report lists them: {small_run.paths.report})" in err
    page = small_run.paths.report.read_text()
    assert "<h2 id='store-problems'>" in page and "record &#x27;zz-broken&#x27; in database &#x27;designer_rewards&#x27; is corrupt" in page
    check_report(page)


def test_headless_chromium_renders_the_report(small_run, tmp_path):
    write_report(small_run.paths)
    assert_not_blank(screenshot(small_run.paths.report, tmp_path / "report.png", tmp_path), (1280, 4000))


def test_the_learning_summary_counts_valid_designs_variance_and_gradient_steps():
    from engine.tools.report import learning_summary

    rows = [
        {"step": 0, "policy_version": 1, "envs_requested": 8, "envs_valid": 3, "edits_requested": 6, "edits_valid": 3, "edit_duplicates": 2,
         "agent_groups": 4, "zero_variance_groups": 3, "learner": {"grad_norm": 0.5, "optimizer_step": 1.0}},
        {"step": 1, "policy_version": 2, "envs_requested": 0, "envs_valid": 0, "agent_groups": 4, "zero_variance_groups": 4,
         "learner": {"grad_norm": 0.0, "optimizer_step": 0.0}},
    ]
    summary = dict(learning_summary(rows))
    assert summary["valid designs, all attempts"] == "37.5% (3 of 8)"
    assert summary["valid designs, fresh"] == "0.0% (0 of 2)" and summary["valid designs, edits"] == "50.0% (3 of 6)"
    assert summary["edits rejected as duplicates"] == "2"
    assert summary["steps with a group of non-zero variance"] == "1 of 2"
    assert summary["groups with non-zero variance"] == "12.5% (1 of 8)"
    assert summary["learner updates with a non-zero policy gradient"] == "1 of 2 (1 optimizer steps in all)"


def test_the_time_figure_stacks_each_steps_phases():
    rows = [{"step": s, "envs_requested": 0, "time_step_s": 10.0 + s, "time_plays_s": 6.0, "time_admission_s": 0.0,
             "time_learner_update_s": 3.0 + s, "time_engine_s": 1.0, "generator_busy_share": 0.5} for s in range(3)]
    figure = time_figure(rows + [{"step": 3, "envs_requested": 0}])  # a row from before the account is left out
    assert figure.series == ("plays", "learner update", "engine", "step wall time", "generator busy share")
    assert figure.points == 3 * 3
    assert_not_blank(figure.png, (520, 320))
    assert time_figure([]).points == 0


def test_the_probe_figure_draws_the_in_loop_evaluation_by_version_with_its_interval():
    rows = [{"eval": {"policy_version": v, "suite": "envs", "episodes": 48, "win_rate": 0.2 + 0.05 * v,
                      "low": 0.1 + 0.05 * v, "high": 0.3 + 0.05 * v}, "eval_policy_version": v} for v in (4, 0, 8)]
    figure = probe_figure(rows + [{"step": 1, "envs_requested": 0}])  # training rows carry no evaluation
    assert figure.series == ("win rate (envs, 48 episodes)",) and figure.points == 3
    assert_not_blank(figure.png, (520, 320))
    assert probe_figure([]).points == 0
