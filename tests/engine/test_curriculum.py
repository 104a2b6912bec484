"""What the designer is asked for (engine/curriculum.py): skills, corpus, seeds, the fixed pool, seed records."""

import json

import pytest

from engine.protocol.contract import env_class_name
from engine.curriculum import (
    SKILL_DESCRIPTIONS,
    CorpusError,
    Passage,
    PassageSampler,
    SeedsError,
    active_skills,
    load_corpus,
    load_seeds,
    seed_record,
    slot_skills,
    truncate_words,
)

SIX = list(SKILL_DESCRIPTIONS)


def test_three_of_six_skills_alternate_by_refresh_as_in_the_reference():
    assert active_skills(SIX, 3, 0) == SIX[:3]
    assert active_skills(SIX, 3, 1) == SIX[3:]
    assert active_skills(SIX, 3, 2) == SIX[:3]
    assert active_skills(SIX, 4, 1) == [SIX[4], SIX[5], SIX[0], SIX[1]]  # wraps around
    assert slot_skills(["A", "B", "C"], 7) == ["A", "B", "C", "A", "B", "C", "A"]


def test_shipped_corpus_and_seeds_load():
    passages = load_corpus()
    assert len(passages) >= 100 and all(p.text for p in passages)
    assert len({p.passage_id for p in passages}) == len(passages)
    seeds = load_seeds()
    assert sorted((s.skill, s.level) for s in seeds) == sorted((skill, level) for skill in SIX for level in ("easy", "medium", "hard"))
    assert all(s.hint and "class" in s.code for s in seeds)
    assert all(env_class_name(s.code).endswith("Env") for s in seeds)


def test_corpus_formats_and_errors(tmp_path):
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"id": "a", "text": " one "}) + "\n\n" + json.dumps({"orig_doc": "two", "text": "ignored"}) + "\n")
    assert load_corpus(jsonl) == [Passage("a", "one"), Passage("line3", "two")]
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "b.txt").write_text("bee")
    (folder / "empty.txt").write_text("  ")
    assert load_corpus(folder) == [Passage("b", "bee")]
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus(tmp_path / "missing.jsonl")
    jsonl.write_text('{"text": "ok"}\n{broken\n')
    with pytest.raises(CorpusError, match=r"line 2 is not JSON"):
        load_corpus(jsonl)
    jsonl.write_text('{"title": "no text"}\n')
    with pytest.raises(CorpusError, match=r"line 1 has no `text` or `orig_doc` string field"):
        load_corpus(jsonl)
    (folder / "b.txt").unlink()
    with pytest.raises(CorpusError, match="holds no passages"):
        load_corpus(folder)


def test_passages_are_drawn_without_replacement_and_reseeding_repeats_the_order():
    passages = [Passage(str(i), f"text {i}") for i in range(5)]
    sampler = PassageSampler(passages, seed=1)
    first = [sampler.sample().passage_id for _ in range(5)]
    assert sorted(first) == ["0", "1", "2", "3", "4"]
    sampler.reseed(1)
    assert [sampler.sample().passage_id for _ in range(5)] == first


def test_truncate_words_marks_the_cut():
    assert truncate_words("a b c", 3) == "a b c"
    assert truncate_words("a b c d", 2) == "a b\n[Document truncated at ~2 words]"


def test_env_class_name_follows_the_validators_rule():
    code = "class Helper(BaseEnvironment):\n    pass\n\nclass GuessEnv(Helper):\n    pass\n"
    assert env_class_name(code) == "GuessEnv"  # not the first class that mentions Env
    assert env_class_name("def f(:\n") == "Env"
    assert env_class_name("class Game:\n    pass\n") == "Env"


@pytest.mark.parametrize(
    "manifest, message",
    [
        (None, "has no manifest.json"),
        ("{not json", "is not JSON"),
        ('{"file": "a.py"}', "must be a JSON list"),
        ('[{"file": "a.py", "skill": "A"}]', "entry 0 needs non-empty string fields file, skill and hint"),
        ('[{"file": "missing.py", "skill": "A", "hint": "h"}]', "entry 0 names .*missing.py, which does not exist"),
        ('[{"file": "a.py", "skill": "A", "hint": "h", "level": "trivial"}]', "entry 0 has level 'trivial': give one of easy, medium, hard"),
    ],
)
def test_bad_seed_folders_are_named(tmp_path, manifest, message):
    (tmp_path / "a.py").write_text("class AEnv: ...\n")
    if manifest is not None:
        (tmp_path / "manifest.json").write_text(manifest)
    with pytest.raises(SeedsError, match=f"^curriculum.seeds: .*{message}"):
        load_seeds(tmp_path)


def test_a_fixed_pool_is_drawn_without_replacement_across_refreshes(tmp_path):
    from engine.curriculum import load_environment_folder, pool_draw

    draws = [pool_draw(20, 3, r, seed=0) for r in range(6)]  # 20 // 3 = 6 refreshes per pass
    drawn = [i for d in draws for i in d]
    assert len(set(drawn)) == 18 and all(0 <= i < 20 for i in drawn)
    assert pool_draw(20, 3, 6, seed=0) != draws[0] and pool_draw(20, 3, 2, seed=0) == draws[2]  # a new pass; repeatable
    assert pool_draw(2, 3, 0, seed=0) in ([0, 1], [1, 0])  # more slots than environments: each once
    for i in range(3):
        (tmp_path / f"g{i}.py").write_text(f"class G{i}Env: ...\n")
    pool = load_environment_folder(tmp_path)
    assert [(e.name, e.skill, e.hint) for e in pool] == [("g0", "", ""), ("g1", "", ""), ("g2", "", "")]
    (tmp_path / "empty").mkdir()
    with pytest.raises(SeedsError, match=r"^curriculum.fixed_envs: .* holds no .py environments$"):
        load_environment_folder(tmp_path / "empty")
    with pytest.raises(SeedsError, match=r"^curriculum.fixed_envs: .* is not a folder of environment .py files$"):
        load_environment_folder(tmp_path / "missing")


def test_a_seed_record_is_valid_and_has_no_design_behind_it():
    record = seed_record("seed-alpha", "A", "class AlphaEnv: ...", "a hint", setting="tool_use")
    assert (record.env_id, record.skill, record.code, record.hint, record.setting) == ("seed-alpha", "A", "class AlphaEnv: ...", "a hint", "tool_use")
    assert (record.valid, record.source, record.step_created, record.reason, record.checks) == (True, "seed", -1, "", [])
    assert (record.passage_id, record.designer_sample_id, record.worker_id, record.parent_id) == ("", "", "", "")
    assert seed_record("rlve-s0003-x", "B", "{}", "", step=3).step_created == 3
