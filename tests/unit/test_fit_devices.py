"""The per-device fit (issue 81, item 2): llama.cpp's whole-layer split, each device's share (the target's layers,
their KV, the compute buffer, the output layer, the draft where it is placed, the runtime) against its own free
memory, the default placement, the one-line refusals, and `specops fit`'s per-device table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.cli import main
from specops.fit import (
    CPU,
    GPU_OVERHEAD,
    MIB,
    DeviceFree,
    FitError,
    FitParams,
    Memory,
    ModelShape,
    estimate,
    fit_devices,
    gpu_layers,
    kv_cells,
    layer_devices,
    measure_memory,
    parse_device_mib,
)
from specops.fitdevices import pipeline_copies_bytes, pipeline_parallel
from specops.ggufmeta import read
from specops.knobs import knob
from tests.unit.synthgguf import write_gguf

LLAMA_CPP = Path.home() / ".cache" / "specops" / "src" / "llama.cpp-0c1e57098" / "src" / "llama-model.cpp"


# ---- llama.cpp's layer split ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("n_layer", "split", "ngl", "devices"), [
    # the output layer is layer n_layer: 5 "layers" over 1:1, the fraction il/5 against 0.5 and 1
    (4, (1, 1), None, [0, 0, 0, 1, 1]),
    # 32 "layers" over 1:1: layer 16 sits exactly on 0.5, and upper_bound puts it on the second device
    (31, (1, 1), None, [0] * 16 + [1] * 16),
    # 81 over 3:1: il/81 < 0.75 up to layer 60
    (80, (3, 1), None, [0] * 61 + [1] * 20),
    # a device whose part is 0 gets nothing
    (4, (1, 0, 1), None, [0, 0, 0, 2, 2]),
    # float32, as llama.cpp computes it: 0.1 + 0.2 rounds to float32(0.3), which equals 3/10 there, so layer 3 goes
    # past it to the third device (float64 would put it on the second)
    (9, (0.1, 0.2, 0.7), None, [0, 1, 1, 2, 2, 2, 2, 2, 2, 2]),
    # -ngl 10 of 32 layers: the first 23 stay on the CPU, the last 10 (output included) are split 1:1
    (32, (1, 1), 10, [CPU] * 23 + [0] * 5 + [1] * 5),
    # by free memory (the default): 32000 and 24000 MiB as bytes
    (80, (32000.0 * MIB, 24000.0 * MIB), None, [0] * 47 + [1] * 34),
])
def test_layers_go_where_llama_cpp_puts_them(n_layer, split, ngl, devices):
    assert layer_devices(n_layer, split, ngl) == devices


def test_the_rule_is_llama_cpps_own():
    """The split arithmetic quoted from the vendored source (when it is there): cumulative float splits normalised,
    std::upper_bound of (il - i_gpu_start)/act_gpu_layers, the output layer as layer n_layer_all."""
    if not LLAMA_CPP.is_file():
        pytest.skip("the vendored llama.cpp source is not on this machine")
    text = LLAMA_CPP.read_text()
    for line in ("splits[i] = split_sum;", "splits[i] /= split_sum;",
                 "const int i_gpu_start = std::max(n_layer_all + 1 - n_gpu_layers, 0);",
                 "std::upper_bound(splits.begin(), splits.begin() + n_devices(), "
                 "float(il - i_gpu_start)/act_gpu_layers)",
                 "pimpl->dev_output = get_layer_buft_list(n_layer_all);"):
        assert line in text, line


def test_gpu_layers_reads_ngl():
    assert [gpu_layers(v) for v in (None, "auto", "all", -1, "99", 10, "x")] == [None, None, None, None, 99, 10, None]


# ---- shapes --------------------------------------------------------------------------------------------------------
def shape(path: str, n_layer: int, layer_mib: int, output_mib: int, n_embd: int, n_head: int, n_kv: int, n_ff: int,
          vocab: int = 128256) -> ModelShape:
    return ModelShape(path=path, n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, n_head=n_head, n_head_kv=[n_kv] * n_layer,
                      key_length=n_embd // n_head, value_length=n_embd // n_head, n_vocab=vocab, context_length=131072,
                      weights=(n_layer * layer_mib + output_mib + 500) * MIB, sliding_window=None,
                      input_bytes=500 * MIB, layer_bytes=(layer_mib * MIB,) * n_layer, output_bytes=output_mib * MIB)


# a 70B (80 layers of 500 MiB, 1000 MiB output layer) and a 1B draft, on an RTX 5090 and an RTX 4090
TARGET = shape("llama-70b.gguf", 80, 500, 1000, 8192, 64, 8, 28672)
DRAFT = shape("llama-1b.gguf", 16, 60, 250, 2048, 32, 8, 8192)
HOST = [DeviceFree("CUDA0", 32000 * MIB, 32607 * MIB, "NVIDIA GeForce RTX 5090"),
        DeviceFree("CUDA1", 24000 * MIB, 24564 * MIB, "NVIDIA GeForce RTX 4090")]
CELLS = kv_cells(8192, 1, False)


def fit(**settings):
    params = FitParams(ctx_size=8192, cache_type_v="q8_0", draft_n_max=16, **settings)
    return fit_devices(TARGET, DRAFT, params, HOST, CELLS)


def test_each_device_holds_its_layers_their_kv_the_output_layer_and_the_runtime():
    place, rows = fit(tensor_split="1,1")
    cuda0, cuda1 = rows
    assert place.layers.count(0) == 41 and place.layers.count(1) == 40  # 39 layers and the output layer
    assert cuda0.get("target layers") == 41 * 500 * MIB and cuda1.get("target layers") == 39 * 500 * MIB
    assert cuda0.get("target output layer") == 0 and cuda1.get("target output layer") == 1000 * MIB
    per_layer_kv = TARGET.kv_bytes(CELLS, "f16", "q8_0", [0])
    assert cuda0.get("target KV cache") == 41 * per_layer_kv and cuda1.get("target KV cache") == 39 * per_layer_kv
    # each device's one-device compute estimate and, under pipeline parallelism (every layer offloaded over two
    # devices), the scheduler's further copies of its split's inputs: 3 KQ masks and 5 hidden states of the ubatch
    compute = TARGET.compute_bytes(CELLS, 512, True)
    copies = 3 * 2 * 512 * CELLS + 5 * 4 * 512 * TARGET.n_embd
    assert pipeline_copies_bytes(TARGET, CELLS, 512) == copies and pipeline_parallel(place, TARGET.n_layer)
    assert cuda0.get("target compute") == cuda1.get("target compute") == compute + copies
    assert cuda0.get("runtime overhead") == cuda1.get("runtime overhead") == GPU_OVERHEAD
    # the draft, whole, on the one with the most room after the target: the 5090
    assert cuda0.get("draft weights") == DRAFT.gpu_weights() and cuda1.get("draft weights") == 0
    assert cuda0.get("draft KV cache") == DRAFT.kv_bytes(CELLS, "f16", "f16")


def test_one_device_over_is_refused_naming_it_even_when_the_sum_fits():
    """32 + 24 GB: a split that leaves ~30 GB on the 4090. The sum over both cards fits; the 4090 does not."""
    _place, rows = fit(tensor_split="1,2")
    cuda0, cuda1 = rows
    assert cuda0.fits and not cuda1.fits
    assert sum(r.needed + r.margin for r in rows) <= sum(d.free for d in HOST)  # the sum fits
    from specops.fit import overflow_line

    line = overflow_line(rows, sum(d.free for d in HOST))
    assert line is not None and "\n" not in line
    assert line.startswith("CUDA1 (NVIDIA GeForce RTX 4090) would hold 29,718 MiB (target layers 26,500, ")
    assert "and has 24,000 MiB free" in line and "(the sum fits, this device does not)" in line


def test_the_default_placement_splits_by_free_memory_and_puts_the_draft_where_most_room_is_left():
    place, rows = fit()
    assert place.split_text == "32000,24000" and "tensor_split" in place.chosen
    assert place.layers.count(0) == 47 and place.layers.count(1) == 34
    assert place.draft_devices == ("CUDA0",) and "most room" in place.chosen["draft_device"]
    assert all(r.fits for r in rows)
    assert place.args(draft=True) == [knob("device").flag, "CUDA0,CUDA1", knob("tensor_split").flag, "32000,24000",
                                      knob("draft_device").flag, "CUDA0"]
    # a split that loads the 5090: the 4090 has the most room left, and the draft goes there
    place, rows = fit(tensor_split="5,1")
    assert place.draft_devices == ("CUDA1",)
    room = {r.device.name: r.device.free - r.needed + r.get("draft weights") + r.get("draft KV cache")
            + r.get("draft compute") for r in rows}
    assert room["CUDA1"] > room["CUDA0"]
    # one device named: the draft follows it (llama.cpp's draft follows --device)
    place, _rows = fit(device="CUDA1")
    assert place.devices == ("CUDA1",) and place.draft_devices == ("CUDA1",)
    assert place.layers.count(0) == 81


def test_a_draft_device_given_is_used():
    place, rows = fit(tensor_split="1,1", draft_device="CUDA1")
    assert place.draft_devices == ("CUDA1",) and "draft_device" not in place.chosen
    assert rows[1].get("draft weights") == DRAFT.gpu_weights() and rows[0].get("draft weights") == 0
    place, rows = fit(tensor_split="1,1", draft_device="none")
    assert place.draft_devices == () and not any(r.get("draft weights") for r in rows)


def test_split_mode_none_puts_everything_on_the_main_gpu():
    place, rows = fit(split_mode="none", main_gpu=1)
    assert place.devices == ("CUDA1",) and place.layers.count(0) == 81 and place.draft_devices == ("CUDA1",)
    assert rows[0].needed == 0 and not rows[1].fits


# ---- bad input: one line each, nothing measured further ----------------------------------------------------------
@pytest.mark.parametrize(("settings", "says"), [
    ({"device": "CUDA2"}, "device='CUDA2': CUDA2 is not among the devices this build lists (given): CUDA0, CUDA1"),
    ({"tensor_split": "3,1,1"}, "tensor_split='3,1,1': 3 parts for the 2 devices of the target (CUDA0, CUDA1)"),
    ({"tensor_split": "3,-1"}, "tensor_split='3,-1': -1 is negative"),
    ({"tensor_split": "3,x"}, "tensor_split='3,x': 'x' is not a number"),
    ({"tensor_split": "0,0"}, "every part is 0"),
    ({"device": "CUDA0", "tensor_split": "3,1"}, "2 parts for the 1 device of the target (CUDA0)"),
    ({"draft_device": "CUDA3"}, "draft_device='CUDA3': CUDA3 is not among the devices this build lists"),
    ({"tensor_split": "100,1"}, "tensor_split='100,1' leaves CUDA1 no layer of the target's 80"),
    ({"split_mode": "none", "main_gpu": 2}, "main_gpu=2: the target has 2 devices (CUDA0, CUDA1)"),
])
def test_bad_placement_is_one_line(settings, says):
    params = FitParams(ctx_size=8192, **settings)
    with pytest.raises(FitError) as err:
        fit_devices(TARGET, DRAFT, params, HOST, CELLS, "given")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_placement_on_a_build_that_lists_no_device_is_refused(tmp_path: Path):
    model = write_gguf(tmp_path / "m.gguf")
    ram = Memory("host RAM", 1 << 40, 1 << 40, "psutil (available)")
    with pytest.raises(FitError, match=r"^device='CUDA0': this build lists no device \(host RAM") as err:
        estimate(model, None, FitParams(device="CUDA0"), ram, per_device=True)
    assert "\n" not in str(err.value)
    # llama.cpp's own defaults (split mode layer, main GPU 0) and "none" ask for no device
    estimate(model, None, FitParams(device="none", split_mode="layer", main_gpu=0), ram, per_device=True)
    with pytest.raises(FitError, match="finds no cuda device"):
        measure_memory("cuda", list_devices_output="Available devices:\n  (none)\n")


# ---- the memory of each device -------------------------------------------------------------------------------------
def test_device_memory_from_the_operator_nvidia_smi_and_list_devices():
    mem = measure_memory("cuda", device_mib="CUDA0=32000,CUDA1=24000")
    assert [(d["name"], d["free_mib"]) for d in mem.devices] == [("CUDA0", 32000), ("CUDA1", 24000)]
    assert mem.available == 56000 * MIB and mem.source == "given (--device-mib)"
    for bad in ("CUDA0", "CUDA0=lots", "=5", "CUDA0=1,CUDA0=2", ","):
        with pytest.raises(FitError, match="--device-mib") as err:
            parse_device_mib(bad)
        assert "\n" not in str(err.value)
    smi = ("name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n"
           "NVIDIA GeForce RTX 5090, 32607 MiB, 100 MiB, 32000 MiB\nNVIDIA GeForce RTX 4090, 24564 MiB, 100 MiB, "
           "24000 MiB\n")
    mem = measure_memory("cuda", nvidia_smi_output=smi)
    assert [(d["name"], d["description"]) for d in mem.devices] == [("CUDA0", "NVIDIA GeForce RTX 5090"),
                                                                    ("CUDA1", "NVIDIA GeForce RTX 4090")]
    listed = ("Available devices:\n  Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31) (24560 MiB, 23000 MiB free)\n")
    assert measure_memory("vulkan", list_devices_output=listed).devices[0]["name"] == "Vulkan0"


def test_a_gguf_gives_each_layer_its_own_bytes(tmp_path: Path):
    path = write_gguf(tmp_path / "m.gguf", extra_tensor_elems=1000, output_tensor=True)
    s = ModelShape.of(read(path))
    assert s.layer_bytes == (4000, 0, 0, 0)
    assert s.output_bytes + s.input_bytes + sum(s.layer_bytes) == s.weights
    assert s.output_weights() + sum(s.layer_weights()) == s.gpu_weights()


# ---- specops fit -----------------------------------------------------------------------------------------------------
@pytest.fixture
def models(tmp_path: Path) -> tuple[Path, Path]:
    return write_gguf(tmp_path / "t.gguf", n_layer=8), write_gguf(tmp_path / "d.gguf", n_layer=2)


def test_fit_prints_the_per_device_table_and_refuses_the_device_that_overflows(models, capsys):
    target, draft = models
    # each device needs its runtime (576 MiB) and a 512 MiB margin: 1,000 MiB on CUDA1 is short, the sum is not
    args = ["fit", str(target), str(draft), "--backend", "cuda", "--device-mib", "CUDA0=3000,CUDA1=1000"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "per device (split mode layer; -ts 3000,1000: each device's free MiB, llama.cpp's default; draft on " \
           "CUDA0: the most room after the target" in out
    assert [line.split()[0] for line in out.splitlines() if line.startswith("  CUDA")] == ["CUDA0", "CUDA1"]
    [result] = [line for line in out.splitlines() if line.startswith("result:")]
    assert result.startswith("result: DOES NOT FIT: CUDA1 would hold ") and "has 1,000 MiB free" in result
    assert "(the sum fits, this device does not)" in result
    assert main([*args[:-1], "CUDA0=3000,CUDA1=2000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True and data["refusal"] is None
    assert [d["name"] for d in data["per_device"]] == ["CUDA0", "CUDA1"]
    assert data["placement"]["draft_devices"] == ["CUDA0"] and data["placement"]["tensor_split"] == "3000,2000"
    assert "result: fits on every device" in data["message"]


def test_fit_refuses_bad_placement_in_one_line_and_reports_nothing(models, capsys):
    target, draft = models
    base = ["fit", str(target), str(draft), "--backend", "cuda", "--device-mib", "CUDA0=3000,CUDA1=2000"]
    for extra, says in ((["--device", "CUDA7"], "CUDA7 is not among the devices this build lists"),
                        (["-ts", "1,1,1"], "3 parts for the 2 devices"),
                        (["-ts", "1,-2"], "-2 is negative"),
                        (["-devd", "CUDA5"], "draft_device='CUDA5'"),
                        (["-ts", "30,1"], "leaves CUDA1 no layer of the target's 8")):
        assert main([*base, *extra]) == 2, extra
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1 and says in captured.err, (extra, captured.err)


def test_one_device_and_no_placement_is_the_pool_fit_as_before(models, capsys):
    target, _draft = models
    assert main(["fit", str(target), "--backend", "cuda", "--device-mib", "CUDA0=80000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "per_device" not in data and data["fits"] is True
    assert main(["fit", str(target), "--backend", "cuda", "--memory-mib", "80000", "--device", "CUDA0"]) == 0
    assert "not checked per device" in capsys.readouterr().out


def test_fit_reads_the_placement_from_the_profile(models, tmp_path, capsys):
    """As the deploy runs it (roles/models fit.yml: the composed profile on stdin, nvidia-smi's CSV)."""
    target, draft = models
    profile = tmp_path / "p.yml"
    profile.write_text(f"draft_model: {draft}\ntensor_split: '1,3'\ndraft_device: CUDA1\nsplit_mode: null\n")
    smi = "memory.total [MiB], memory.used [MiB], memory.free [MiB]\n4000, 0, 4000\n4000, 0, 4000\n"
    assert main(["fit", str(target), str(draft), "--profile", str(profile), "--backend", "cuda",
                 "--nvidia-smi-output", smi, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["placement"]["tensor_split"] == "1,3" and data["placement"]["draft_devices"] == ["CUDA1"]
    assert set(data["placement"]["chosen"]) == {"device"}  # every device listed: nothing else filled in
    assert any("nvidia-smi's order" in n for n in data["notes"])



def test_pipeline_parallelism_only_where_llama_cpp_turns_it_on():
    """More than one device holding whole layers, every layer and the output offloaded (src/llama-context.cpp at
    0c1e57098); one device, a row split, or a layer kept on the CPU: no copies, the one-device compute alone."""
    compute = TARGET.compute_bytes(CELLS, 512, True)
    place, rows = fit(device="CUDA1")
    assert not pipeline_parallel(place, TARGET.n_layer) and rows[1].get("target compute") == compute
    place, rows = fit(tensor_split="1,1", split_mode="row")
    assert not pipeline_parallel(place, TARGET.n_layer)
    place, rows = fit(tensor_split="1,1", ngl="60")
    assert not pipeline_parallel(place, TARGET.n_layer)
    assert {r.get("target compute") for r in rows if r.get("target layers")} == {compute}


def test_an_rpc_device_carries_no_runtime_of_this_process():
    """An RPC device's backend lives in its ggml-rpc-server, which reports the free memory left after its own
    context: no CUDA context is counted on it; a CUDA device beside it keeps its own."""
    devices = [DeviceFree("RPC0", 24000 * MIB, 24000 * MIB), DeviceFree("CUDA0", 24000 * MIB, 24000 * MIB)]
    params = FitParams(ctx_size=8192, cache_type_v="q8_0", device="RPC0,CUDA0", tensor_split="1,1")
    _place, rows = fit_devices(TARGET, DRAFT, params, devices, CELLS)
    assert rows[0].get("target layers") and rows[0].get("runtime overhead") == 0
    assert rows[1].get("runtime overhead") == GPU_OVERHEAD
