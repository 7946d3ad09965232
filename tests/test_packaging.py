"""setup.py's ranges, constraints.txt and the tool that writes it agree."""

import importlib.metadata
import importlib.util
import pathlib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = pathlib.Path(__file__).resolve().parent.parent


def _load_tool():
    spec = importlib.util.spec_from_file_location(
        "freeze_constraints", REPO / "tools" / "freeze_constraints.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


freeze_constraints = _load_tool()


def _pins(text):
    pins = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_constraints_pin_every_requirement_inside_its_range():
    install_requires, extras_require = freeze_constraints.setup_requirements()
    pins = _pins((REPO / "constraints.txt").read_text(encoding="utf-8"))
    # CI installs the dev and beam extras (.ci/run), so both are pinned.
    for line in install_requires + extras_require["dev"] + extras_require["beam"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"constraints.txt has no pin for {line}; regenerate it"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]} outside setup.py's {line}; regenerate it"
        )


def test_tensorflow_and_tensorflow_text_share_a_minor_release():
    install_requires, extras_require = freeze_constraints.setup_requirements()
    ranges = {
        str(Requirement(line).specifier)
        for line in install_requires + extras_require["gpu"]
        if Requirement(line).name in ("tensorflow", "tensorflow-text")
    }
    assert len(ranges) == 1, ranges  # tensorflow, tensorflow-text, tensorflow[and-cuda]
    pins = _pins((REPO / "constraints.txt").read_text(encoding="utf-8"))
    minor = [".".join(pins[name].split(".")[:2]) for name in ("tensorflow", "tensorflow-text")]
    assert minor[0] == minor[1]


def test_freeze_writes_the_installed_closure():
    text = freeze_constraints.constraints_text([])
    pins = _pins(text)
    # Direct requirements and transitive ones (keras -> optree, scikit-learn -> scipy).
    for name in ("tensorflow", "tensorflow-text", "keras", "optree", "scikit-learn", "scipy"):
        assert pins[name] == importlib.metadata.version(name), name
    # Only the closure: the dev tools are not requested here.
    assert "pytest" not in pins and "ruff" not in pins
    assert list(pins) == sorted(pins)


def test_constraints_header_names_the_extras_it_was_frozen_with():
    header = [
        line
        for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    ]
    extras = header[0].split("extras: ")[1].split(")")[0]
    assert f'#   pip install -c constraints.txt -e ".[{extras}]"' in header
    assert f"#   python tools/freeze_constraints.py --extras={extras}" in header
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert f'-c constraints.txt -e ".[{extras}]"' in ci


def test_freeze_rejects_an_unknown_extra():
    with pytest.raises(
        ValueError,
        match=r"setup.py has no extra \['cuda'\]; it has \['beam', 'dev', 'gpu', 'profile'\]",
    ):
        freeze_constraints.constraints_text(["cuda"])


def test_profile_extra_brings_the_profile_plugin():
    # --profile_steps writes a trace that only TensorBoard's Profile tab shows.
    _, extras_require = freeze_constraints.setup_requirements()
    names = [canonicalize_name(Requirement(line).name) for line in extras_require["profile"]]
    assert names == ["tensorboard-plugin-profile"]
    assert str(Requirement(extras_require["profile"][0]).specifier), "give it a version range"


def test_setup_requirements_names_a_setup_py_without_the_lists(tmp_path):
    setup_py = tmp_path / "setup.py"
    setup_py.write_text("import setuptools\nsetuptools.setup(install_requires=['numpy'])\n")
    with pytest.raises(
        ValueError, match=r"setup.py: no literal _EXTRAS_REQUIRE, _INSTALL_REQUIRES"
    ):
        freeze_constraints.setup_requirements(setup_py)
