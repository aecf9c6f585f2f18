"""Campaign state under crashes, damage, concurrency and hostile files: SIGKILL (also inside
the atomic write), damaged or crafted ``state.json``/``evaluations.csv`` (refused, naming the
file), a second process on the same folder, changed settings on resume, full disks and
read-only folders, strict JSON, and names from files that try to leave the results folder."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bo_ncgp.campaigns import Campaign, RandomSearch, storage
from bo_ncgp.campaigns.runner import CSV, STATE
from bo_ncgp.campaigns.state import CSV_HEADER, csv_rows
from bo_ncgp.campaigns.storage import FolderLock, read_json, write_csv, write_json
from bo_ncgp.campaigns.summary import summarise_campaigns
from bo_ncgp.exceptions import StateError, StorageError
from bo_ncgp.problems.synthetic import TestFunction
from tests.campaigns.damage import CASES
from tests.campaigns.toy import LoggedQuadratic

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = dict(budget=10, batch_size=3, num_initial=4, seed=3)


def make(out, problem=None, **kw):
    return Campaign(problem or LoggedQuadratic(), RandomSearch(), out_dir=out, **{**SETTINGS, **kw})


def points_values(state):
    return [(e["point"], e["value"]) for e in state["evaluations"]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run, and its files as left by a kill in the third batch (two batches
    done, the first of three points in flight finished)."""
    root = tmp_path_factory.mktemp("ref")
    ref = make(root / "ref").run(progress=False)
    st = read_json(root / "ref" / STATE)
    st.pop(storage.CHECKSUM)
    st.update(
        batches=st["batches"][:2],
        evaluations=st["evaluations"][:7],
        iterations=st["iterations"][:2],
        pending={
            "iteration": 2,
            "points": [e["point"] for e in st["evaluations"][7:]],
            "done": {"0": st["evaluations"][7]},
            "acquisition_seconds": 0.01,
        },
        finished=False,
        recommendation=None,
    )
    return ref, st


def stopped(folder, state):
    write_json(folder / STATE, state, checksum=True)
    write_csv(folder / CSV, CSV_HEADER, csv_rows(state, pool=False))
    return folder


def test_a_stopped_campaign_resumes_bit_identical_without_repeating(tmp_path, reference):
    ref, st = reference
    log = tmp_path / "evals.log"
    stopped(tmp_path / "c", st)
    resumed = Campaign.resume(tmp_path / "c", LoggedQuadratic(log=str(log)), RandomSearch())
    out = resumed.run(progress=False)
    assert points_values(out) == points_values(ref)  # exact floats
    finished = [line for line in log.read_text().splitlines() if line.startswith("finish")]
    assert len(finished) == 2  # only the two points in flight that had not finished


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_file_is_refused_by_name(tmp_path, reference, case):
    _, st = reference
    folder = stopped(tmp_path / "c", json.loads(json.dumps(st)))
    name, kind, damage = CASES[case]
    target = folder / name
    if kind == "state":
        crafted = json.loads(json.dumps(st))
        damage(crafted)
        write_json(target, crafted, checksum=True)
    else:
        new = damage(target.read_text())
        target.write_bytes(new if isinstance(new, bytes) else new.encode())
    before = target.read_bytes()
    with pytest.raises(StateError) as err:
        Campaign.resume(folder, LoggedQuadratic(), RandomSearch()).run(progress=False)
    assert str(target) in str(err.value)
    assert target.read_bytes() == before  # nothing was written


def test_changed_settings_are_refused_unless_extended(tmp_path, reference):
    ref, st = reference
    folder = stopped(tmp_path / "c", st)
    for change in ({"budget": 12}, {"batch_size": 2}, {"num_initial": 5}):
        with pytest.raises(StateError, match="extend"):
            Campaign.resume(folder, LoggedQuadratic(), RandomSearch(), **change)
    with pytest.raises(StateError, match="initial design"):
        Campaign.resume(folder, LoggedQuadratic(), RandomSearch(), num_initial=5, extend=True)
    with pytest.raises(StateError, match="budget=8 is less"):
        Campaign.resume(folder, LoggedQuadratic(), RandomSearch(), budget=8, extend=True)
    same = Campaign.resume(folder, LoggedQuadratic(), RandomSearch(), budget=10, batch_size=3)
    assert points_values(same.run(progress=False)) == points_values(ref)
    longer = Campaign.resume(folder, LoggedQuadratic(), RandomSearch(), budget=14, extend=True)
    st2 = longer.run(progress=False)
    assert len(st2["evaluations"]) == 14 and st2["finished"] and st2["budget"] == 14
    assert points_values(st2)[:10] == points_values(ref)  # nothing lost or redone
    assert Campaign.resume(folder, LoggedQuadratic(), RandomSearch(), budget=14).state["finished"]


def test_a_second_process_is_refused_and_a_killed_holder_does_not_block(tmp_path, reference):
    ref, _ = reference
    out = tmp_path / "c"
    script = (
        "from bo_ncgp.campaigns import Campaign, RandomSearch\n"
        "from tests.campaigns.toy import LoggedQuadratic\n"
        f"Campaign(LoggedQuadratic(delay=0.2), RandomSearch(), out_dir={str(out)!r}, "
        f"**{SETTINGS!r}).run(progress=False)\n"
    )
    proc = _spawn(script)
    try:
        _wait_for(lambda: (out / STATE).exists() and (out / storage.LOCK).read_text().strip())
        with pytest.raises(StorageError) as err:
            Campaign.resume(out, LoggedQuadratic(), RandomSearch()).run(progress=False)
        assert str(out) in str(err.value) and f"pid {proc.pid}" in str(err.value)
        with pytest.raises(StorageError, match="in use"):  # a fresh campaign there too
            make(out).run(progress=False)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    resumed = Campaign.resume(out, LoggedQuadratic(), RandomSearch()).run(progress=False)
    assert points_values(resumed) == points_values(ref)


@pytest.mark.parametrize("kill_at", [4, 8, 13])  # an evaluation, the CSV, a batch's end
def test_sigkill_inside_the_atomic_write_then_resume(tmp_path, reference, kill_at):
    """Killed between writing the temporary file and renaming it: the previous state is
    intact, the temporary file is removed at the next start, nothing is lost or repeated."""
    ref, _ = reference
    out = tmp_path / "c"
    script = (
        "import os, signal\n"
        "from bo_ncgp.campaigns import Campaign, RandomSearch\n"
        "from tests.campaigns.toy import LoggedQuadratic\n"
        "real, calls = os.replace, [0]\n"
        "def replace(a, b):\n"
        "    calls[0] += 1\n"
        f"    if calls[0] == {kill_at}:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    real(a, b)\n"
        "os.replace = replace\n"
        f"Campaign(LoggedQuadratic(), RandomSearch(), out_dir={str(out)!r}, "
        f"**{SETTINGS!r}).run(progress=False)\n"
    )
    proc = _spawn(script)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    temps = list(out.glob(".state.json.*")) + list(out.glob(".evaluations.csv.*"))
    assert temps, "the kill came inside a write"
    read_json(out / STATE, require_checksum=True)  # the previous version, complete
    resumed = Campaign.resume(out, LoggedQuadratic(), RandomSearch()).run(progress=False)
    assert not any(p.exists() for p in temps)
    assert points_values(resumed) == points_values(ref)


@pytest.mark.slow
def test_repeated_sigkills_at_random_times_lose_and_repeat_nothing(tmp_path, reference):
    ref, _ = reference
    out, log = tmp_path / "c", tmp_path / "evals.log"
    rng = random.Random(0)
    resume = (
        "from pathlib import Path\n"
        "from bo_ncgp.campaigns import Campaign, RandomSearch\n"
        "from tests.campaigns.toy import LoggedQuadratic\n"
        f"p, out = LoggedQuadratic(delay=0.25, log={str(log)!r}), Path({str(out)!r})\n"
        "c = (Campaign.resume(out, p, RandomSearch()) if (out / 'state.json').exists() else "
        f"Campaign(p, RandomSearch(), out_dir=out, **{SETTINGS!r}))\n"
        "c.run(progress=False)\n"
    )
    kills = 0
    for _ in range(40):
        proc = _spawn(resume)
        # the kill falls at a random time after the process has begun an evaluation, not
        # counted from its start: importing torch alone takes 0.5-2.5 s, machine by machine
        started = f"start {proc.pid} "
        _wait_for(
            lambda p=proc, s=started: p.poll() is not None or s in log.read_text(), timeout=120
        )
        try:
            proc.wait(timeout=rng.uniform(0.1, 1.2))
            break
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    assert kills >= 2
    final = read_json(out / STATE)
    assert final["finished"] and points_values(final) == points_values(ref)


def test_full_disk_and_read_only_folder_give_storage_errors(tmp_path, reference, monkeypatch):
    ref, st = reference
    folder = stopped(tmp_path / "c", st)
    for code, words in ((errno.ENOSPC, "no space left"), (errno.EROFS, "read-only")):

        def fail(fd, code=code):
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(storage.os, "fsync", fail)
        with pytest.raises(StorageError, match=words) as err:
            Campaign.resume(folder, LoggedQuadratic(), RandomSearch()).run(progress=False)
        assert str(folder / STATE) in str(err.value)
        monkeypatch.undo()
        assert not [p.name for p in folder.iterdir() if p.name.startswith(".state")]
    resumed = Campaign.resume(folder, LoggedQuadratic(), RandomSearch()).run(progress=False)
    assert points_values(resumed) == points_values(ref)  # nothing lost by the failed writes


def test_folder_without_write_permission(tmp_path, reference, monkeypatch):
    _, st = reference
    folder = stopped(tmp_path / "c", st)
    if os.name == "posix" and os.geteuid() != 0:
        folder.chmod(0o555)  # the operating system refuses the temporary file
    else:  # root ignores chmod: the temporary file is refused as the OS would refuse it

        def refuse(*args, **kwargs):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

        monkeypatch.setattr(storage.tempfile, "mkstemp", refuse)
    try:
        with pytest.raises(StorageError, match="permission denied") as err:
            Campaign.resume(folder, LoggedQuadratic(), RandomSearch()).run(progress=False)
        assert str(folder) in str(err.value)
    finally:
        folder.chmod(0o755)


def test_stale_temporary_files_are_removed_at_the_next_start(tmp_path, reference):
    _, st = reference
    folder = stopped(tmp_path / "c", st)
    stale = [folder / ".state.json.abc123", folder / ".evaluations.csv.x9.tmp"]
    for p in stale:
        p.write_text("{")
    Campaign.resume(folder, LoggedQuadratic(), RandomSearch()).run(progress=False)
    assert not any(p.exists() for p in stale)


def test_state_json_is_strict_and_non_finite_values_read_back(tmp_path):
    prob = TestFunction("branin", fail_above=5.0, nan_below=-2.0)
    st = make(tmp_path / "f", problem=prob, budget=12).run(progress=False)
    assert any(e["error"] for e in st["evaluations"])

    def refuse(token):
        raise ValueError(f"bare {token} in state.json")

    text = (tmp_path / "f" / STATE).read_text()
    json.loads(text, parse_constant=refuse)  # valid JSON
    back = read_json(tmp_path / "f" / STATE)
    assert json.dumps(back["evaluations"]) == json.dumps(st["evaluations"])  # NaN where NaN


def test_a_lock_is_released_and_held_per_folder(tmp_path):
    with FolderLock(tmp_path / "a"), FolderLock(tmp_path / "b"):
        with pytest.raises(StorageError, match=f"pid {os.getpid()}"):
            FolderLock(tmp_path / "a").acquire()
    with FolderLock(tmp_path / "a"):
        pass


def _crafted(tmp_path, name):
    """A results folder whose only state.json names its strategy ``name`` (as a crafted file
    would, without any checksum)."""
    out = tmp_path / "results" / "hotspots"
    make(out / "random" / "seed_0").run(progress=False)
    f = out / "random" / "seed_0" / STATE
    st = json.loads(f.read_text())
    st.pop(storage.CHECKSUM, None)
    st["strategy"]["name"] = name
    f.write_text(json.dumps(st))
    return out, f


def test_a_strategy_name_from_a_state_file_cannot_write_outside_the_results(tmp_path):
    out, f = _crafted(tmp_path, "../../../escaped")
    with pytest.raises(StateError) as err:
        summarise_campaigns(out, [], [4], plot=False)
    assert str(f) in str(err.value) and "not a safe name" in str(err.value)
    outside = [p for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "results")]
    assert outside == []


def test_a_strategy_name_from_an_archive_cannot_write_outside_the_results(tmp_path):
    out, f = _crafted(tmp_path, "random")
    summarise_campaigns(out, [], [4], plot=False)
    meta = out / "random" / "archive" / "campaigns.json"
    arch = json.loads(meta.read_text())
    arch[str(SETTINGS["seed"])]["strategy"]["name"] = "../../../escaped"
    meta.write_text(json.dumps(arch))
    f.unlink()
    with pytest.raises(StateError) as err:
        summarise_campaigns(out, [], [4], plot=False)
    assert str(meta) in str(err.value)
    outside = [p for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "results")]
    assert outside == []


def _spawn(script):
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.Popen([sys.executable, "-c", script], env=env, cwd=ROOT)


def _wait_for(cond, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if cond():
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.05)
    raise AssertionError("timed out")
