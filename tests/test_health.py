"""The slow-failure detectors on constructed training curves (benchlib.training.health)."""
import numpy as np

from benchlib.training.health import HealthRules, degradation, degraded_step, plateau_step, verdict

RNG = np.random.default_rng(0)


def _noisy(curve, sd=0.02):
    return list(np.asarray(curve) * (1 + sd * RNG.standard_normal(len(curve))))


def _falling(n=300, start=10.0, end=4.0):
    return start + (end - start) * (1 - np.exp(-np.arange(n) / (n / 5)))


def test_a_loss_that_bottoms_out_and_climbs_back_is_degraded_from_its_minimum():
    # fp16 without loss scaling on A: the loss bottoms at step 50, then climbs ~20% and stays
    curve = np.r_[np.linspace(10, 8, 50), np.linspace(8, 9.6, 100), np.full(150, 9.6)]
    losses = _noisy(curve, 0.01)
    start, crossed = degradation(losses)
    assert 40 <= start <= 60          # where the rise began
    assert 60 < crossed < 150         # when it was more than 10% above that minimum
    status, reason, m = verdict(losses, None, True)
    assert status == "degraded" and m["stability/degraded_step"] == start and f"step {start}" in reason


def test_a_healthy_noisy_curve_is_not_degraded():
    # per-batch noise of +-10% (small classification batches) around a falling curve
    assert degraded_step(_noisy(_falling(), 0.10)) is None
    assert verdict(_noisy(_falling(), 0.10), None, True)[0] == "ok"


def test_a_spike_that_recovers_before_the_end_is_not_degradation():
    curve = _falling()
    curve[100:160] *= 1.5  # a 60-step excursion, then back on track
    assert degraded_step(list(curve)) is None


def test_a_short_rise_at_the_very_end_is_not_yet_sustained():
    curve = _falling()
    curve[-5:] *= 1.5
    assert degraded_step(list(curve), HealthRules(min_sustain_steps=10)) is None


def test_a_run_that_did_not_beat_its_baseline_is_stalled_where_the_loss_stopped_improving():
    curve = np.r_[np.linspace(10, 8.5, 80), np.full(220, 8.5)]
    status, reason, m = verdict(list(curve), None, False)
    assert status == "stalled" and "trivial baseline" in reason
    assert 60 <= m["stability/stalled_step"] <= 90


def test_divergence_outranks_the_slow_failures_and_no_baseline_never_stalls():
    curve = list(_falling())
    assert verdict(curve, 12, False)[0] == "diverged"
    assert verdict(curve, None, None)[0] == "ok"  # beats_baseline unknown: never stalled


def test_plateau_step_of_a_flat_curve_is_its_start():
    assert plateau_step([5.0] * 50) == 0


def test_non_finite_steps_do_not_break_the_detectors():
    curve = list(_falling())
    curve[120] = float("nan")
    curve[121] = float("inf")
    assert degraded_step(curve) is None


def test_a_run_that_learned_then_climbed_past_its_baseline_is_degraded_not_stalled():
    # fp16 without loss scaling on real text (H100, 2026-11-26): 11 -> 7.4 by step ~100, then up
    # to ~21 and there to the end, below the 3x-initial divergence line and above the baseline
    curve = np.r_[np.linspace(11, 7.4, 100), np.linspace(7.4, 21, 300), np.full(1100, 21.0)]
    status, reason, m = verdict(_noisy(curve, 0.02), None, False)
    assert status == "degraded" and m["stability/stalled_step"] is not None
    rise = float(reason.split("up to ")[1].split("x")[0])  # the size of the rise (smoothed)
    assert 2 < rise < 3
