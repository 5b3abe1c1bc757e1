"""``python -m course_tools.doctor``: its table and JSON, failures as one row each, the clean-up of its
cluster, and one real run end to end (the slow test of this file, about a minute).

The orchestration is tested with fake checks (no process, no TensorFlow); the cluster's clean-up
on failure with the launcher's TensorFlow-free worker, so those tests take a second or two.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from course_tools import doctor
from course_tools.doctor import FAIL, NOTE, OK, Check, Row
from course_utils import cluster as cl
from course_utils.processes import RESULT_MARKER

SHOW = "course_utils.workers.show_tf_config"


def _fake(key: str, *rows: Row, failure: str = FAIL) -> Check:
    return Check(key, tuple(r.name for r in rows), lambda timeout: list(rows), failure=failure)


def _raises(key: str, names: tuple[str, ...], failure: str = FAIL) -> Check:
    def run(timeout: float) -> list[Row]:
        raise RuntimeError("boom\nsecond line of the message")

    return Check(key, names, run, failure=failure)


FAKES = [
    _fake("versions", Row("versions", OK, "TensorFlow 9.9 matches")),
    _fake("runtime", Row("devices", OK, "CPU x1"), Row("trap demo", NOTE, "present: " + "long words " * 20)),
    _fake("factor", Row("2 replicas vs 1 device", OK, "update on 2 replicas = 1.00x")),
]


def test_table_and_json_shape(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(doctor, "default_checks", lambda: list(FAKES))
    out_file = tmp_path / "doctor.json"
    assert doctor.main(["--json", str(out_file)]) == 0  # notes are not failures
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].split() == ["check", "status", "detail"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    # One row per check, known traps last; the status column lines up.
    names = [line.split("  ")[0].strip() for line in lines[2:] if line and not line.startswith(" ")]
    assert names[:4] == ["versions", "devices", "2 replicas vs 1 device", "trap demo"]
    column = lines[0].index("status")
    assert all(line[column:].split()[0] in (OK, NOTE, FAIL) for line in lines[2:6])
    assert max(len(line) for line in lines) <= 110  # long details wrap under the detail column
    assert "4 checks in" in text and "3 ok, 1 note, no failure" in text
    assert "Traceback" not in text

    data = json.loads(out_file.read_text())
    assert set(data) == {"ok", "seconds", "python", "tested_range", "rows"}
    assert data["ok"] is True and data["tested_range"].startswith("TensorFlow ")
    assert [r["name"] for r in data["rows"]] == names[:4]
    assert all(set(r) == {"name", "status", "detail", "seconds", "data"} for r in data["rows"])
    assert data["rows"][3]["detail"].startswith("present: long words")  # JSON keeps it whole


def test_a_failing_check_fails_the_doctor_with_one_row(monkeypatch, capsys) -> None:
    checks = [
        *FAKES,
        _fake("data", Row("data", FAIL, "could not load MNIST")),
        _raises("cluster", ("2-worker cluster", "trap keras#20585")),
    ]
    monkeypatch.setattr(doctor, "default_checks", lambda: checks)
    assert doctor.main([]) == 1
    text = capsys.readouterr().out
    assert "Traceback" not in text and "RuntimeError: boom second line" in text  # one line
    findings = doctor.run(checks)
    assert not findings.ok
    assert findings.row("data") == Row("data", FAIL, "could not load MNIST", findings.row("data").seconds)
    crashed = findings.row("2-worker cluster")
    assert crashed.status == FAIL
    assert crashed.detail == "the check could not run: RuntimeError: boom second line of the message"
    assert findings.row("trap keras#20585").status == NOTE  # a known trap is never a failure
    assert "2 FAIL" in findings.summary()


def test_a_trap_probe_that_crashes_is_a_note_not_a_failure() -> None:
    findings = doctor.run([*FAKES, _raises("trap", ("trap keras#23085",), failure=NOTE)])
    assert findings.ok
    assert findings.row("trap keras#23085").status == NOTE


def test_a_check_that_forgets_a_row_reports_it() -> None:
    check = Check("runtime", ("devices", "strategy"), lambda timeout: [Row("devices", OK, "CPU x1")])
    rows = doctor.run_check(check, 1.0)
    assert [(r.name, r.status) for r in rows] == [("devices", OK), ("strategy", FAIL)]
    assert rows[1].detail == "the check did not report this row"


def test_fresh_process_checks_turn_crashes_and_hangs_into_rows() -> None:
    crash = doctor.in_fresh_process("no_such_check", ("data",))(60.0)
    assert [(r.name, r.status) for r in crash] == [("data", FAIL)]
    assert crash[0].detail.startswith("its process failed: AttributeError:")
    assert "no_such_check" in crash[0].detail and "\n" not in crash[0].detail
    hung = doctor.in_fresh_process("check_data", ("data",), failure=NOTE)(0.2)
    assert hung == [Row("data", NOTE, "did not finish within 0.2 s and was stopped")]


def test_rows_travel_between_processes_as_one_line(capsys) -> None:
    rows = [Row("data", NOTE, "stand-in", data={"source": "built-in"}), Row("devices", OK, "CPU x1")]
    doctor.emit(rows)
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1 and printed.startswith(RESULT_MARKER)
    assert doctor.parse_rows("noise\n" + printed) == rows
    assert doctor.parse_rows("no result line here") is None
    assert doctor.parse_rows(RESULT_MARKER + "{not json") is None
    assert doctor.parse_rows(RESULT_MARKER + '{"doctor_rows": [{"name": "x"}]}') is None
    with pytest.raises(ValueError, match="status must be one of"):
        Row("x", "fine", "bad status")


def test_without_tensorflow_nothing_starts_and_the_doctor_fails(monkeypatch) -> None:
    from course_utils import versions

    monkeypatch.setattr(versions, "installed", lambda: {"tensorflow": None, "keras": None})
    started = []
    monkeypatch.setattr(doctor, "run_check", lambda check, timeout: started.append(check.key) or [])
    findings = doctor.run(doctor.default_checks()[1:])
    assert started == [] and not findings.ok
    assert {r.detail for r in findings.rows} == {"not run: TensorFlow is not installed"}
    assert {r.name for r in findings.rows if r.status == NOTE} == {
        "trap keras#20585",
        "trap keras#23085",
        "trap steps_per_execution",
    }
    row = doctor.versions_rows()[0]
    assert row.status == FAIL and row.detail.startswith("TensorFlow is not installed")


def _nothing_left(rows: list[Row]) -> None:
    data = rows[0].data
    assert data["ports"] and data["pids"]
    assert data["leftover_processes"] == [] and data["busy_ports"] == []
    assert cl.leftover_processes() == []
    assert all(cl.port_is_free(p) for p in data["ports"])
    assert cl.running_clusters() == []


@pytest.mark.parametrize(
    "args, reason",
    [
        (
            ["--serve", "300", "--fail", "worker 1"],
            "worker 1 failed: exit code 1 (RuntimeError: worker 1 was asked",
        ),
        (["--serve", "300"], "worker 0 did not print a line matching"),
    ],
)
def test_the_cluster_check_leaves_no_process_and_no_port_when_it_fails(args, reason) -> None:
    # The workers would serve 300 s: a check that stops them returns long before (about 5 s idle).
    start = time.monotonic()
    rows = doctor.cluster_rows(3.0, target=SHOW, args=args)
    assert time.monotonic() - start < 150
    assert [(r.name, r.status) for r in rows] == [("2-worker cluster", FAIL), ("trap keras#20585", NOTE)]
    assert rows[0].detail.startswith(reason), rows[0].detail
    assert rows[0].detail.endswith("stopped: no process or port left")
    assert rows[1].detail.startswith("not tried: ")
    _nothing_left(rows)


def test_the_real_doctor_end_to_end(tmp_path: Path, capsys) -> None:
    """Every check for real, as `python -m course_tools.doctor --json FILE` runs them."""
    from course_utils.versions import NEWEST, installed, release

    out_file = tmp_path / "doctor.json"
    start = time.monotonic()
    code = doctor.main(["--json", str(out_file)])
    seconds = time.monotonic() - start
    text = capsys.readouterr().out
    assert code == 0, text
    findings = json.loads(out_file.read_text())
    rows = {r["name"]: r for r in findings["rows"]}
    assert list(rows) == [
        "versions",
        "devices",
        "strategy",
        "auto chain",
        "Model.fit",
        "custom loop",
        "2 replicas vs 1 device",
        "2-worker cluster",
        "data",
        "trap keras#20585",
        "trap keras#23085",
        "trap steps_per_execution",
    ]
    for name in ("devices", "strategy", "auto chain", "Model.fit", "custom loop", "2 replicas vs 1 device"):
        assert rows[name]["status"] == OK, rows[name]
    assert rows["2 replicas vs 1 device"]["data"]["factor"] == pytest.approx(1.0, abs=1e-3)
    assert rows["2-worker cluster"]["status"] == OK, rows["2-worker cluster"]
    _nothing_left([Row(**rows["2-worker cluster"])])
    # COURSE_OFFLINE=1 in the tests: the built-in data, a note.
    assert rows["data"]["status"] == NOTE and "built-in offline stand-in" in rows["data"]["detail"]
    traps = [name for name in rows if name.startswith("trap ")]
    assert all(rows[name]["status"] in (OK, NOTE) for name in traps)
    found = installed()
    if release(found["tensorflow"]) == NEWEST["tensorflow"] and release(found["keras"]) == NEWEST["keras"]:
        # The pinned stack has all three bugs; when one of these fails, upstream fixed it.
        assert rows["versions"]["status"] == OK and "matches the tested range" in rows["versions"]["detail"]
        assert [rows[name]["data"].get("state") for name in traps] == ["present"] * 3
    assert "Traceback" not in text and "FAIL" not in text
    assert seconds < 240  # about a minute on an idle 2-core machine; generous for a busy CI runner
