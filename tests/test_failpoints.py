"""The named moments a fault-injection run stops a process at (tf_mlstm/failpoints.py)."""

import json
import signal

import pytest

from tf_mlstm import failpoints


def test_every_moment_is_reached_somewhere_in_the_package():
    import pathlib  # pylint: disable=g-import-not-at-top

    package = pathlib.Path(failpoints.__file__).parent
    code = "\n".join(p.read_text() for p in package.rglob("*.py"))
    for moment in failpoints.MOMENTS:
        assert f'failpoints.reach("{moment}")' in code, moment


def test_parse_reads_moment_hit_action_and_worker():
    assert failpoints.parse("checkpoint-state:2:kill:1,export:1:term-launcher") == [
        ("checkpoint-state", 2, "kill", 1),
        ("export", 1, "term-launcher", None),
    ]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nowhere:1:kill", "the moments are"),
        ("export:1:stop", "the moments are"),
        ("export:0:kill", "the hit must be"),
        ("export:kill", "is not moment:hit:action"),
    ],
)
def test_a_bad_spec_is_one_line_naming_it(spec, message):
    with pytest.raises(ValueError, match=message):
        failpoints.parse(spec)


@pytest.fixture
def signals_seen(monkeypatch):
    """The signals this process sends itself, recorded instead of acted on."""
    seen = []
    monkeypatch.setattr(failpoints, "_hits", failpoints.collections.Counter())
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    yield seen
    signal.signal(signal.SIGTERM, previous)


def test_reach_acts_on_its_hit_only_and_on_its_worker_only(monkeypatch, signals_seen, capfd):
    monkeypatch.setenv(failpoints.ENV, "checkpoint-state:2:term")
    failpoints.reach("checkpoint-state")
    failpoints.reach("export")
    assert signals_seen == []
    failpoints.reach("checkpoint-state")
    assert signals_seen == [signal.SIGTERM]
    # Said as it acts: a fault-injection tool knows the moment came.
    assert capfd.readouterr().err == "failpoint checkpoint-state #2: term\n"
    failpoints.reach("checkpoint-state")
    assert signals_seen == [signal.SIGTERM]

    monkeypatch.setattr(failpoints, "_hits", failpoints.collections.Counter())
    monkeypatch.setenv(failpoints.ENV, "export:1:term:1")
    monkeypatch.setenv("TF_CONFIG", json.dumps({"task": {"type": "worker", "index": 0}}))
    failpoints.reach("export")
    assert signals_seen == [signal.SIGTERM]
    monkeypatch.setattr(failpoints, "_hits", failpoints.collections.Counter())
    monkeypatch.setenv("TF_CONFIG", json.dumps({"task": {"type": "worker", "index": 1}}))
    failpoints.reach("export")
    assert signals_seen == [signal.SIGTERM, signal.SIGTERM]


def test_without_the_variable_reach_does_nothing(monkeypatch, signals_seen):
    monkeypatch.delenv(failpoints.ENV, raising=False)
    for moment in failpoints.MOMENTS:
        failpoints.reach(moment)
    assert signals_seen == []
