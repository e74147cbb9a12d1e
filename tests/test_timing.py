"""The timed windows' optimizer bracket: its time and share come from the windows' own marks,
steps that log are left out, and a run with nothing to time says so (None), not 0."""
import pytest
import torch

from benchlib.core.timing import OPTIMIZER_MARKS_PER_WINDOW, WindowTimer


class _FakeClock:
    """Marks are the time of a hand-driven clock: the arithmetic is checked, not the host's speed."""

    def __init__(self):
        self.now = 0.0

    def mark(self):
        return self.now

    def seconds(self, a, b):
        return b - a


def _timed(steps, logged=(), step_s=0.010, optimizer_s=0.002, windows=2, warmup=1):
    timer = WindowTimer(torch.device("cpu"), warmup, steps, windows)
    timer.clock = clock = _FakeClock()
    for s in range(steps):
        timer.before_step(s)
        clock.now += step_s - optimizer_s  # forward and backward
        with timer.optimizer(timed=s not in logged):
            clock.now += optimizer_s
        timer.after_step(s)
    timer.finish()
    return timer


def test_the_optimizer_time_and_its_share_of_the_step_come_from_the_windows():
    timer = _timed(9)
    assert [n for n, _ in timer.done] == [4, 4]
    m = timer.optimizer_metrics()
    assert abs(m["time/optimizer_ms"] - 2.0) < 1e-9 and abs(m["time/optimizer_share"] - 0.2) < 1e-9


def test_logged_steps_are_left_out_and_a_run_that_only_logged_has_no_optimizer_time():
    # logged steps pay for the forensic samples inside their optimizer bracket (here: 3x as long)
    timer = WindowTimer(torch.device("cpu"), 0, 8, 1)
    timer.clock = clock = _FakeClock()
    for s in range(8):
        timer.before_step(s)
        with timer.optimizer(timed=s % 2 == 1):
            clock.now += 0.006 if s % 2 == 0 else 0.002
        clock.now += 0.008
        timer.after_step(s)
    timer.finish()
    assert [n for n, _ in timer.optimizer_done] == [4] and timer.optimizer_done[0][1] == pytest.approx(4 * 0.002)
    assert abs(timer.optimizer_metrics()["time/optimizer_ms"] - 2.0) < 1e-9
    everything_logged = _timed(9, logged=range(9)).optimizer_metrics()
    assert everything_logged == {"time/optimizer_ms": None, "time/optimizer_share": None}


def test_warmup_steps_are_not_timed_and_marks_per_window_are_bounded():
    timer = _timed(2 * OPTIMIZER_MARKS_PER_WINDOW + 11, windows=1, warmup=10)
    (n, _), = timer.optimizer_done
    assert n == OPTIMIZER_MARKS_PER_WINDOW and timer.done[0][0] == 2 * OPTIMIZER_MARKS_PER_WINDOW + 1


def test_a_failed_step_leaves_no_half_open_bracket():
    timer = WindowTimer(torch.device("cpu"), 0, 2, 1)
    timer.before_step(0)
    try:
        with timer.optimizer():
            raise FloatingPointError("a step that raised")
    except FloatingPointError:
        pass
    timer.after_step(0)
    timer.finish()
    assert timer.optimizer_done == [(0, 0.0)] and timer.optimizer_metrics()["time/optimizer_ms"] is None


def test_the_energy_meter_reads_the_runs_own_gpu_by_uuid_not_nvmls_first(monkeypatch):
    """Under CUDA_VISIBLE_DEVICES=1 torch calls the run's GPU cuda:0, while NVML's index 0 is the
    host's first GPU: the meter finds its GPU by UUID, and reads nothing where none matches."""
    import sys
    import types
    from benchlib.core import env

    counters = {"GPU-aaa": 5_000_000, "GPU-bbb": 7_000_000}  # mJ
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: ["GPU-aaa", "GPU-bbb"][i],
        nvmlDeviceGetUUID=lambda h: h.encode(), nvmlDeviceGetTotalEnergyConsumption=lambda h: counters[h])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    seen = {"uuid": "bbb"}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(uuid=seen["uuid"]))
    meter = env.EnergyMeter(torch.device("cuda", 0))
    assert meter.read_j() == 7000.0
    seen["uuid"] = "ccc"
    assert env.EnergyMeter(torch.device("cuda", 0)).read_j() is None
