"""The NVML source. There is no GPU on the test machines, so most tests run the real `NvmlSource` code
against a REPLAY of recorded NVML readings (tests/gpu/nvml_replay.py, recordings in tests/data/nvml);
the real pynvml is exercised for the "No GPU visible" state, and for real readings where a driver is."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from cube_jupyter.gpu.nvml import NvmlSource
from cube_jupyter.gpu.record import record
from cube_jupyter.gpu.sources import NoGpuVisible
from cube_jupyter.local import gpus
from tests.gpu import nvml_replay
from tests.gpu.nvml_replay import NvmlReplay

RECORDINGS = Path(__file__).resolve().parents[1] / "data" / "nvml"
TWO_A100 = RECORDINGS / "a100x2-processes.json"
MIG = RECORDINGS / "a100-mig.json"
NO_POWER_TEMP = RECORDINGS / "vgpu-no-power-temp.json"
MIB = 1024 * 1024
Replay = Callable[..., NvmlReplay]


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


DRIVER = _driver_present()


def _recorded(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _calls(path: Path, sample: int, device: int) -> dict[str, Any]:
    return _recorded(path)["samples"][sample]["devices"][device]["calls"]


def test_replayed_a100s_give_every_metric_in_the_models_units() -> None:
    """Replay of two A100s: each field is the recorded NVML answer, converted (bytes→MiB, mW→W)."""
    devices = NvmlSource(nvml=NvmlReplay.from_file(TWO_A100)).read()

    assert [device.index for device in devices] == [0, 1]
    for device in devices:
        calls = _calls(TWO_A100, 0, device.index)
        assert device.uuid == calls["nvmlDeviceGetUUID"]
        assert device.name == "NVIDIA A100-SXM4-80GB"
        assert device.utilization_pct == calls["nvmlDeviceGetUtilizationRates"]["gpu"]
        assert device.memory_used_mib == calls["nvmlDeviceGetMemoryInfo"]["used"] / MIB
        assert device.memory_total_mib == 81920
        assert device.temperature_c == calls["nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"]
        assert device.power_w == calls["nvmlDeviceGetPowerUsage"] / 1000
        assert device.sm_clock_mhz == calls["nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"]
        assert device.mig == ()
        recorded = calls["nvmlDeviceGetComputeRunningProcesses"]
        assert [(p.pid, p.used_memory_mib) for p in device.processes] == [
            (p["pid"], p["usedGpuMemory"] / MIB) for p in recorded
        ]
    assert devices[0].power_w == pytest.approx(188.412)
    assert [p.pid for p in devices[1].processes] == [41234, 52001]


def test_each_read_is_the_next_recorded_sample_looping_at_the_end() -> None:
    """Replay: ten reads give the ten recorded samples, including GPU 0 idle at 0% while it holds memory."""
    replay = NvmlReplay.from_file(TWO_A100)
    source = NvmlSource(nvml=replay)
    samples = _recorded(TWO_A100)["samples"]

    readings = [source.read() for _ in samples]

    recorded = [s["devices"][0]["calls"]["nvmlDeviceGetUtilizationRates"]["gpu"] for s in samples]
    assert [r[0].utilization_pct for r in readings] == recorded
    idle = [r[0] for r in readings if r[0].utilization_pct == 0]
    assert idle and all(device.memory_used_mib and device.memory_used_mib > 19000 for device in idle)
    assert [p.pid for p in readings[-1][1].processes] == [41234, 52001, 52417]  # a process that started later
    assert source.read()[0].utilization_pct == recorded[0]
    assert replay.sample_index == 0


def test_pid_map_turns_recorded_pids_into_live_ones(install_nvml_replay: Replay) -> None:
    """Replay with recorded PID 41234 mapped to this test's process, as attribution tests need."""
    install_nvml_replay("a100x2-processes.json", pid_map={41234: os.getpid()})

    devices = NvmlSource().read()

    assert [os.getpid() in {p.pid for p in device.processes} for device in devices] == [True, True]
    assert 41234 not in {p.pid for device in devices for p in device.processes}


def test_install_swaps_the_module_an_existing_source_reads() -> None:
    """A source made before `install` reads the replay after it, and the real pynvml after `uninstall`."""
    source = NvmlSource()
    nvml_replay.install(NO_POWER_TEMP)
    try:
        assert [device.name for device in source.read()] == ["GRID T4-16Q"]
    finally:
        nvml_replay.uninstall()
    assert gpus.NVML is pynvml
    if not DRIVER:
        with pytest.raises(NoGpuVisible):
            source.read()


def test_mig_mode_lists_the_instances() -> None:
    """Replay of an A100 in MIG mode: the two instances, utilization not supported on the parent."""
    (device,) = NvmlSource(nvml=NvmlReplay.from_file(MIG)).read()

    assert device.utilization_pct is None
    assert [(m.gpu_instance_id, m.compute_instance_id, m.name) for m in device.mig] == [
        (1, 0, "NVIDIA A100-SXM4-80GB MIG 3g.40gb"),
        (2, 0, "NVIDIA A100-SXM4-80GB MIG 3g.40gb"),
    ]
    first = _recorded(MIG)["samples"][0]["devices"][0]["mig_devices"][0]["calls"]
    assert device.mig[0].uuid == first["nvmlDeviceGetUUID"]
    assert device.mig[0].memory_used_mib == first["nvmlDeviceGetMemoryInfo"]["used"] / MIB
    assert device.mig[0].memory_total_mib == 40192
    assert [p.pid for p in device.processes] == [60112]


def test_metrics_a_device_does_not_support_are_none() -> None:
    """Replay of a vGPU whose power and temperature are NotSupported and one process's memory N/A."""
    (device,) = NvmlSource(nvml=NvmlReplay.from_file(NO_POWER_TEMP)).read()

    assert (device.temperature_c, device.power_w) == (None, None)
    assert device.utilization_pct == 23
    assert device.mig == ()
    assert [(p.pid, p.used_memory_mib) for p in device.processes] == [(3120, 4812), (3377, None)]


def test_no_device_is_no_gpu_visible() -> None:
    """Replay of a recording whose driver reports zero devices."""
    recording = copy.deepcopy(_recorded(NO_POWER_TEMP))
    for sample in recording["samples"]:
        sample["nvmlDeviceGetCount"], sample["devices"] = 0, []

    with pytest.raises(NoGpuVisible, match="No GPU visible: the NVIDIA driver reports no GPU"):
        NvmlSource(nvml=NvmlReplay(recording)).read()


def test_close_shuts_nvml_down_and_a_later_read_starts_it_again() -> None:
    replay = NvmlReplay.from_file(TWO_A100)
    source = NvmlSource(nvml=replay)
    source.read()
    assert replay.initialised

    source.close()
    assert not replay.initialised
    assert len(source.read()) == 2
    assert replay.initialised


def test_concurrent_reads_each_see_one_whole_sample() -> None:
    """Replay read from eight threads at once: no read mixes two samples' devices."""
    source = NvmlSource(nvml=NvmlReplay.from_file(TWO_A100))
    pairs = {
        tuple(d["calls"]["nvmlDeviceGetUtilizationRates"]["gpu"] for d in sample["devices"])
        for sample in _recorded(TWO_A100)["samples"]
    }
    seen: list[tuple[float | None, ...]] = []
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(25):
                seen.append(tuple(device.utilization_pct for device in source.read()))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert len(seen) == 200
    assert set(seen) <= pairs


@pytest.mark.parametrize("path", [TWO_A100, MIG, NO_POWER_TEMP], ids=lambda p: p.stem)
def test_recording_the_replay_gives_the_recording_back(path: Path) -> None:
    """record.py run over a replay writes the same samples: the recordings are in record.py's format and
    hold exactly the calls NvmlSource makes."""
    recorded = _recorded(path)["samples"]

    again = record(len(recorded), 0, nvml=NvmlReplay.from_file(path))

    def without_time(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{key: value for key, value in sample.items() if key != "time"} for sample in samples]

    assert again["format"] == "cube-jupyter/nvml-recording@1"
    assert without_time(again["samples"]) == without_time(recorded)


@pytest.mark.skipif(DRIVER, reason="this machine has an NVIDIA driver")
def test_real_pynvml_without_a_driver_is_no_gpu_visible() -> None:
    """The real pynvml on this GPU-less machine: the plain state, not an exception from NVML."""
    with pytest.raises(NoGpuVisible) as caught:
        NvmlSource().read()
    assert caught.value.message == (
        "No GPU visible: the NVIDIA driver library libnvidia-ml.so.1 is not loaded on this machine"
    )


@pytest.mark.skipif(DRIVER, reason="this machine has an NVIDIA driver")
def test_record_without_a_gpu_exits_non_zero_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "recording.json"
    done = subprocess.run(
        [sys.executable, "-m", "cube_jupyter.gpu.record", str(out), "--samples", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "No GPU visible" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


@pytest.mark.skipif(not DRIVER, reason="no NVIDIA driver on this machine")
def test_real_nvml_reads_this_machines_gpus(tmp_path: Path) -> None:
    """Real NVML (only where a driver is): readings, and a recording that replays to the same devices."""
    devices = NvmlSource().read()
    assert devices and all(device.uuid and device.memory_total_mib for device in devices)
    out = tmp_path / "recording.json"
    subprocess.run([sys.executable, "-m", "cube_jupyter.gpu.record", str(out), "--samples", "2"], check=True)
    replayed = NvmlSource(nvml=NvmlReplay.from_file(out)).read()
    assert [d.uuid for d in replayed] == [d.uuid for d in devices]
