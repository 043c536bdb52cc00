"""bench/trace_serving.py (issue 44's serving day, a model; the short variant of `bench/trace.py --day
serving`): the designs see the same day, the objects are gpuctl's, the HPA's rule, and the floor/burst
split as gpuctl's verdict plays it: another team's reclaim and the team's own higher priority take burst,
never the floor."""

from __future__ import annotations

from bench.trace_serving import (
    DESIGNS,
    SERVICES,
    Day,
    TrainingJob,
    _built,
    day,
    training_yaml,
)
from gpuctl.constants import Labels


def _floor_pods_bound(d: Day) -> dict[str, tuple[int, int]]:
    """Per service: (floor pods bound to a node, minReplicas)."""
    out = {}
    for s in SERVICES:
        floor = d.deploys[s.name]
        out[s.name] = (
            sum(1 for p in floor.pods if p["spec"].get("nodeName")),
            int(floor.obj["spec"]["replicas"]),
        )
    return out


def test_a_short_day_is_the_same_for_every_design_and_autoscaling_gives_training_the_gpus() -> None:
    short = day(7, minutes=8 * 60)
    assert short == day(7, minutes=8 * 60)  # deterministic per seed
    days = {design: Day(7, design, 8 * 60) for design in DESIGNS}
    assert len({str(d.loads) for d in days.values()}) == 1
    assert len({str([(j.name, j.submitted, j.gpus, j.runtime) for j in d.jobs]) for d in days.values()}) == 1
    fixed, auto = short["fixed"], short["autoscaled"]
    # fixed holds its 23 GPUs (11 + 6 + 3 x 2) the whole time; the autoscaled services far less at night
    assert fixed["preempted_floor"] == 0 and fixed["serving_gpu_hours"] == 23 * 8
    assert auto["serving_gpu_hours"] < fixed["serving_gpu_hours"] * 0.6
    assert auto["training_gpu_hours"] > fixed["training_gpu_hours"]
    assert auto["preempted_floor"] == 0


def test_the_objects_are_gpuctls_the_floor_and_burst_at_their_classes() -> None:
    d = Day(7, "autoscaled", 2)
    floor, burst = d.deploys["chat"].obj, d.deploys["chat-burst"].obj
    assert floor["metadata"]["labels"][Labels.KUEUE_PRIORITY] == "gpuctl-serving-floor"
    assert burst["metadata"]["labels"][Labels.KUEUE_PRIORITY] == "gpuctl-serving-burst"
    assert d.hpas["chat"]["spec"]["maxReplicas"] == 9  # maxReplicas 11 - minReplicas 2
    d.step()
    pod = d.deploys["chat"].pods[0]
    assert pod["metadata"]["labels"][Labels.KUEUE_PRIORITY] == "gpuctl-serving-floor"  # Kueue's copy
    assert _floor_pods_bound(d)["chat"] == (2, 2)


def test_the_hpa_scales_the_burst_on_the_load_above_the_floor_and_down_after_the_window() -> None:
    d = Day(7, "autoscaled", 2)
    chat = SERVICES[0]  # floor 2 x target 10: the floor serves 20 in flight
    assert [d.hpa_burst(chat, load) for load in (15, 20, 20.5, 35)] == [0, 0, 1, 2]
    assert d.hpa_burst(chat, 500) == 9  # at most maxReplicas - minReplicas
    # down only on the highest recommendation of the last 5 minutes
    assert [d.hpa_burst(chat, 0) for _ in range(5)] == [9, 9, 9, 9, 0]


def test_another_teams_reclaim_and_the_teams_own_high_job_take_burst_never_the_floor() -> None:
    d = Day(7, "autoscaled", 4)
    for s in SERVICES:
        d.loads[s.name] = [float(s.peak)] * 4  # every service at its maximum all the time
    jobs = [
        TrainingJob("tr-a-x", "team-a", 8, "low", 0, 100),
        TrainingJob("tr-a-y", "team-a", 8, "low", 0, 100),
        *(TrainingJob(f"tr-b-{i}", "team-b", 8, "medium", 1, 100) for i in range(3)),
        TrainingJob("tr-a-h", "team-a", 4, "high", 2, 100),
    ]
    d.jobs, d.job_of = jobs, {j.name: j for j in jobs}
    d.templates = {j.name: _built(training_yaml(j), j.team)[0]["spec"]["template"] for j in jobs}
    d.step()  # the pool is idle: team-a's 23 GPUs of services and 16 of training (15 borrowed)
    assert [d.gap[s.name][-1][:2] for s in SERVICES] == [(11, 11), (6, 6), (3, 3)]
    d.step()  # team-b, within its quota, takes 16 back: burst replicas first
    assert d.preemptions["burst"] > 0 and d.preemptions["training"] == 0
    assert all(j.running for j in jobs[2:4])
    d.step()
    assert all(j.running for j in jobs[2:])  # the third and team-a's own high job
    assert d.preemptions["floor"] == 0
    assert all(bound == floor for bound, floor in _floor_pods_bound(d).values())
    # what the burst lost waits at Kueue's gate: desired above running, per gpuctl.domain.serving.scale
    assert sum(want - run for s in SERVICES for want, run, _ in [d.gap[s.name][-1]]) > 0
