"""The placement settings in the knob table (issue 81, item 1): the target's devices, the draft's, the tensor split,
the split mode, the main GPU and the draft's GPU layers, rendered, checked against the build, described like every
other knob; bad placement is one line in the profile, the first play's input checks and `specops argv`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specops.argv import FlagError, build_argv
from specops.capabilities import parse_help
from specops.deploycheck import check_inputs
from specops.devices import device_list, placement_problem, placement_set, split_parts
from specops.knobs import DRAFT, PLACEMENT, VALUED, fit_knobs, knob
from specops.profile import ProfileError, ServerProfile

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
CURRENT_HELP = (FIX / "llama-server-0c1e57098" / "llama-server_help.txt").read_text()
CURRENT = parse_help(CURRENT_HELP)
LEGACY = parse_help((FIX / "llama-server-legacy" / "help.txt").read_text())
SPECS = yaml.safe_load((ROOT / "roles/llama_server/meta/argument_specs.yml").read_text())["argument_specs"]["main"][
    "options"]
DEFAULTS = yaml.safe_load((ROOT / "roles/llama_server/defaults/main.yml").read_text())


@pytest.mark.parametrize(("name", "flags", "render", "llama_default"), [
    ("device", ("--device", "-dev"), VALUED, None),
    ("draft_device", ("--spec-draft-device", "-devd", "--device-draft"), DRAFT, None),
    ("tensor_split", ("--tensor-split", "-ts"), VALUED, None),
    ("split_mode", ("--split-mode", "-sm"), VALUED, "layer"),
    ("main_gpu", ("--main-gpu", "-mg"), VALUED, 0),
    ("draft_ngl", ("--spec-draft-ngl", "-ngld", "--gpu-layers-draft"), DRAFT, "auto"),
    ("ngl", ("--gpu-layers", "-ngl", "--n-gpu-layers"), VALUED, "auto"),
])
def test_each_placement_setting_is_a_knob_the_fit_reads_and_the_role_exposes(name, flags, render, llama_default):
    k = knob(name)
    assert (k.flags, k.render, k.llama_default, k.default) == (flags, render, llama_default, None)
    assert k.fit and k in fit_knobs() and k.role
    assert k.role_var in DEFAULTS and DEFAULTS[k.role_var] is None  # unset: llama.cpp's own (or the fit's default)
    assert SPECS[k.role_var]["type"] == k.type
    assert all(CURRENT.has(f) for f in flags)
    if k.choices:
        assert tuple(c for c in SPECS[k.role_var]["choices"] if c is not None) == k.choices


def test_the_placement_settings_are_listed_once():
    assert PLACEMENT == ("device", "draft_device", "tensor_split", "split_mode", "main_gpu")
    assert knob("split_mode").choices == ("none", "layer", "row", "tensor")
    assert knob("main_gpu").low == 0


PLAN = {"model": "/m.gguf", "draft_model": "/d.gguf", "device": "CUDA0,CUDA1", "tensor_split": "3,1",
        "split_mode": "layer", "main_gpu": 0, "draft_device": "CUDA0", "draft_ngl": "all"}


def test_they_are_rendered_in_the_tables_order_with_the_builds_spelling():
    argv = build_argv(ServerProfile.from_dict(PLAN), CURRENT)
    general = argv[argv.index("--parallel") + 2:argv.index("--metrics")]
    assert general == ["--device", "CUDA0,CUDA1", "--split-mode", "layer", "--tensor-split", "3,1", "--main-gpu", "0"]
    assert argv[argv.index("--spec-type"):] == ["--spec-type", "draft-simple", "--spec-draft-ngl", "all",
                                                "--spec-draft-device", "CUDA0"]
    legacy = build_argv(ServerProfile.from_dict(PLAN), LEGACY)  # before --spec-draft-device: -devd
    assert legacy[-4:] == ["-ngld", "all", "-devd", "CUDA0"]


def test_left_open_they_write_nothing():
    argv = build_argv(ServerProfile.from_dict({"model": "/m.gguf", "draft_model": "/d.gguf"}), CURRENT)
    assert not {"--device", "--tensor-split", "--split-mode", "--main-gpu", "--spec-draft-device"} & set(argv)


def test_the_draft_device_goes_with_a_draft_model_only():
    argv = build_argv(ServerProfile.from_dict({"model": "/m.gguf", "spec_type": "ngram-mod", "draft_device": "CUDA1"}),
                      CURRENT)
    assert "--spec-draft-device" not in argv


def test_a_build_without_the_flag_refuses_it():
    old = parse_help("\n".join(line for line in CURRENT_HELP.splitlines()
                               if not line.startswith(("-ts,", "-dev,"))))
    with pytest.raises(FlagError, match=r"^tensor_split: this llama-server build accepts none of --tensor-split, -ts"):
        build_argv(ServerProfile.from_dict({"model": "/m.gguf", "tensor_split": "1,1"}), old)


# ---- reading them ---------------------------------------------------------------------------------------------------
def test_device_lists_and_splits_as_llama_cpp_reads_them():
    assert device_list(None) is None and device_list("none") == ()
    assert device_list("CUDA0, CUDA1") == ("CUDA0", "CUDA1")
    assert split_parts("3,1") == (3.0, 1.0) and split_parts("3/1") == (3.0, 1.0) and split_parts(None) is None
    assert split_parts(2) == (2.0,)
    assert placement_set({"device": "none", "split_mode": "layer", "main_gpu": 0}) == []
    assert placement_set({"device": "CUDA0", "split_mode": "row", "main_gpu": "1"}) == ["device", "split_mode",
                                                                                         "main_gpu"]


# ---- bad input: one line each, nothing rendered -------------------------------------------------------------------
BAD = [  # (settings, the setting named, what the line says after "NAME=VALUE: ")
    ({"tensor_split": "3,-1"}, "tensor_split", "-1 is negative"),
    ({"tensor_split": "3;1"}, "tensor_split", "'3;1' is not a number"),
    ({"tensor_split": "0,0"}, "tensor_split", "every part is 0"),
    ({"device": "CUDA0,CUDA1", "tensor_split": "1,1,1"}, "tensor_split",
     "3 parts for the 2 devices of the target (CUDA0, CUDA1)"),
    ({"device": "none", "tensor_split": "1"}, "tensor_split",
     "is none, so there is no device to split the target over"),
    ({"device": "CUDA0,,CUDA1"}, "device", "an empty device name"),
    ({"draft_device": "none,CUDA0"}, "draft_device", "none stands alone"),
    ({"device": "CUDA0", "split_mode": "none", "main_gpu": 1}, "main_gpu", "the target has 1 device (CUDA0)"),
]


@pytest.mark.parametrize(("settings", "name", "says"), BAD)
def test_the_profile_refuses_bad_placement_in_one_line(settings, name, says):
    with pytest.raises(ProfileError) as err:
        ServerProfile.from_dict({"model": "/m.gguf", **settings})
    assert str(err.value).startswith(f"{name}={settings[name]!r}: ") and says in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("settings", "name", "says"), BAD)
def test_the_first_play_refuses_bad_placement_in_one_line_naming_the_variable(settings, name, says):
    values = {**{k: v for k, v in DEFAULTS.items() if not (isinstance(v, str) and "{{" in v)},
              **{knob(n).role_var: value for n, value in settings.items()}}
    [problem] = check_inputs(values, SPECS)
    assert problem.startswith(f"{knob(name).role_var}={settings[name]!r}: ") and says in problem, problem


def test_a_split_mode_that_is_none_of_llama_cpps_is_refused():
    with pytest.raises(ProfileError, match=r"^split_mode 'rows' is not one of none, layer, row, tensor$"):
        ServerProfile.from_dict({"model": "/m.gguf", "split_mode": "rows"})
    [problem] = check_inputs({"llama_server_split_mode": "rows"}, SPECS)
    assert problem.startswith("llama_server_split_mode='rows': not one of none, layer, row, tensor")
    [problem] = check_inputs({"llama_server_main_gpu": -1}, SPECS)
    assert problem.startswith("llama_server_main_gpu=-1: must be at least 0")


def test_against_the_devices_a_build_lists():
    listed = ["CUDA0", "CUDA1"]
    assert placement_problem({"device": "CUDA1", "draft_device": "CUDA0", "tensor_split": "1"}, listed) is None
    assert placement_problem({"tensor_split": "1,1"}, listed) is None
    assert "CUDA2 is not among the devices this build lists (nvidia-smi): CUDA0, CUDA1" in placement_problem(
        {"device": "CUDA2"}, listed, source="nvidia-smi")
    assert "1 part for the 2 devices of the target" in placement_problem({"tensor_split": "1"}, listed)
    assert "this build lists no device" in placement_problem({"split_mode": "row"}, [])
    assert placement_problem({"split_mode": "layer", "device": "none"}, []) is None
    assert placement_problem({"main_gpu": 5}, listed) is None  # split mode layer: llama.cpp does not read it
    assert "main_gpu=5" in placement_problem({"main_gpu": 5, "split_mode": "none"}, listed)
