"""The PromQL evaluator of the alert tests (queueing/testing/promql.py) against vectors computed by hand
from Prometheus's documented semantics."""

from __future__ import annotations

import pytest

from queueing.testing.promql import PromQLError, Samples, alert_states, evaluate, labels_of

L = labels_of


def gauges() -> Samples:
    s = Samples()
    for t in (0.0, 30.0):
        s.add(t, "pending", {"cluster_queue": "a", "status": "active"}, 3)
        s.add(t, "pending", {"cluster_queue": "a", "status": "inadmissible"}, 2 if t else 0)
        s.add(t, "pending", {"cluster_queue": "b", "status": "inadmissible"}, 5)
    return s


def test_selectors_matchers_and_lookback() -> None:
    s = gauges()
    assert evaluate('pending{status="inadmissible"}', s, at=30) == {
        L(__name__="pending", cluster_queue="a", status="inadmissible"): 2,
        L(__name__="pending", cluster_queue="b", status="inadmissible"): 5,
    }
    assert evaluate('pending{status!="inadmissible"}', s, at=30) == {
        L(__name__="pending", cluster_queue="a", status="active"): 3
    }
    assert set(evaluate('pending{cluster_queue=~"a|c", status!~"act.*"}', s, at=30).values()) == {2}
    assert evaluate('{__name__="pending", cluster_queue="b"}', s, at=10) == {
        L(__name__="pending", cluster_queue="b", status="inadmissible"): 5  # the sample at 0 (latest ≤ 10)
    }
    # a sample is visible for 5 minutes, then the series is gone; nothing before the first sample
    assert len(evaluate("pending", s, at=30 + 299)) == 3
    assert evaluate("pending", s, at=30 + 300) == {}
    assert evaluate("pending", s, at=-1) == {}


def test_aggregations_and_comparisons() -> None:
    s = gauges()
    assert evaluate('sum by (cluster_queue) (pending{status="inadmissible"}) > 0', s, at=0) == {
        L(cluster_queue="b"): 5  # a's is 0 at t=0: filtered out
    }
    assert evaluate('sum by (cluster_queue) (pending{status="inadmissible"}) > 0', s, at=30) == {
        L(cluster_queue="a"): 2,
        L(cluster_queue="b"): 5,
    }
    assert evaluate("sum(pending)", s, at=30) == {L(): 10}
    assert evaluate("max(pending) without (status)", s, at=30) == {
        L(cluster_queue="a"): 3,
        L(cluster_queue="b"): 5,
    }
    assert evaluate("min(pending)", s, at=30) == {L(): 2}
    assert evaluate("count(pending) by (status)", s, at=30) == {
        L(status="active"): 1,
        L(status="inadmissible"): 2,
    }
    assert evaluate("avg(pending)", s, at=30) == {L(): 10 / 3}
    assert evaluate("max(pending) < 1", s, at=30) == {}
    assert evaluate("max(pending) >= 5", s, at=30) == {L(): 5}
    assert evaluate("sum(pending) == bool 10", s, at=30) == {L(): 1.0}
    assert evaluate("sum(pending) != bool 10", s, at=30) == {L(): 0.0}
    assert evaluate("1 < max(pending)", s, at=30) == {L(): 5}  # scalar on the left: the vector's value
    assert evaluate("sum(pending) * 60 / 2 - 1", s, at=30) == {L(): 299}
    assert evaluate("max(nothing)", s, at=30) == {}  # an aggregation of nothing is empty


def test_absent() -> None:
    s = Samples()
    s.add(0, "up", {"job": "queueing-metrics", "instance": "a"}, 1)
    s.add(0, "up", {"job": "queueing-metrics", "instance": "b"}, 0)
    assert evaluate('absent(up{job="queueing-metrics"} == 1)', s, at=0) == {}
    s.add(15, "up", {"job": "queueing-metrics", "instance": "a"}, 0)
    assert evaluate('absent(up{job="queueing-metrics"} == 1)', s, at=15) == {L(): 1}  # not from a selector
    assert evaluate('absent(up{job="other", instance=~".+"})', s, at=15) == {L(job="other"): 1}
    assert evaluate('absent(up{job="queueing-metrics"})', s, at=15) == {}


def test_rate_and_increase_extrapolate_as_prometheus() -> None:
    s = Samples()
    key = {"cluster_queue": "a", "reason": "Preempted"}
    for t, v in ((0, 0), (60, 30), (120, 60), (180, 90)):
        s.add(t, "evicted_total", key, v)
    # window (0, 180]: the samples at 60, 120, 180 (the one at 0 is outside: left-open); increase 60
    # over 120 s; the start is 60 s away, under 1.1 × the 60 s spacing, and the counter would not reach
    # 0 sooner (120 × 30/60 = 60 s): extrapolated by 60 s; the end is at the last sample:
    # 60 × (120 + 60) / 120 = 90, a rate of 90/180
    assert evaluate("increase(evicted_total[3m])", s, at=180) == {L(**key): 90.0}
    assert evaluate("rate(evicted_total[3m])", s, at=180) == {L(**key): 0.5}
    # window (-60, 180]: all four samples, increase 90 over 180 s; the counter is 0 at the first
    # sample, so nothing is added before it: 90 over a 240 s window
    assert evaluate("rate(evicted_total[4m])", s, at=180) == {L(**key): 90.0 / 240}
    # and at 240 over (-80, 240]: the end 60 s away (< 66 s) is added: 90 × (180 + 60)/180
    assert evaluate("increase(evicted_total[320s])", s, at=240) == {L(**key): 120.0}
    late = Samples()
    for t, v in ((100, 50), (160, 80), (220, 110)):
        late.add(t, "c_total", {}, v)
    # (20, 220]: the start 80 s away (over 66 s): half a spacing, 30 s, is added (zero is 100 s away):
    # 60 × (120 + 30)/120
    assert evaluate("increase(c_total[200s])", late, at=220) == {L(): 75.0}
    # a counter reset (the process restarted) keeps what was counted before it
    r = Samples()
    for t, v in ((0, 10), (10, 20), (20, 5), (30, 15)):
        r.add(t, "c_total", {}, v)
    # increase 5 + 20 (the reset) = 25 over 30 s; the start 10 s away (< 11 s), zero 12 s away: 10 s
    assert evaluate("increase(c_total[40s])", r, at=30) == {L(): pytest.approx(25 * 40 / 30)}
    assert evaluate("rate(c_total[5s])", r, at=30) == {}  # one sample in the window: no rate
    big = Samples()
    for i in range(31):  # 7 a minute for 30 minutes, scraped every 60 s
        big.add(60.0 * i, "evicted_total", key, 7.0 * i)
    v = evaluate("sum by (cluster_queue, reason) (rate(evicted_total[15m])) > 0.1", big, at=1800)
    # (900, 1800]: 15 samples 960..1800, increase 98 over 840 s, the start 60 s away: 98 × 900/840
    assert v == {L(cluster_queue="a", reason="Preempted"): pytest.approx(105 / 900)}


def test_alert_states_follow_for_at_instants() -> None:
    s = Samples()
    for t in range(0, 3601, 60):
        s.add(float(t), "stalled", {}, 1 if 600 <= t <= 3000 else 0)
    instants = [float(t) for t in range(0, 3601, 60)]
    rule = "max(stalled) >= 1"
    assert alert_states(rule, 60, s, [i for i in instants if i <= 540]) == {}
    assert alert_states(rule, 60, s, [i for i in instants if i <= 600]) == {L(): "pending"}
    assert alert_states(rule, 60, s, [i for i in instants if i <= 660]) == {L(): "firing"}
    assert alert_states(rule, 3600, s, [i for i in instants if i <= 3000]) == {L(): "pending"}
    assert alert_states(rule, 60, s, instants) == {}  # resolved once it is 0 again
    with pytest.raises(ValueError, match="ascend"):
        alert_states(rule, 60, s, [60.0, 0.0])


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("histogram_quantile(0.9, x)", "not supported"),
        ("a / b", "two vectors"),
        ("rate(x)", "range selector"),
        ("x[5m]", "only supported inside"),
        ("sum(x", r"expected '\)'"),
        ("x{a=1}", "must be a string"),
        ("1 > 2", "need bool"),
    ],
)
def test_outside_the_subset_is_an_error(expr: str, message: str) -> None:
    s = Samples()
    s.add(0, "x", {}, 1)
    s.add(0, "a", {}, 1)
    s.add(0, "b", {}, 1)
    with pytest.raises(PromQLError, match=message):
        evaluate(expr, s, at=0)


def test_scrape_text_becomes_samples_with_target_labels() -> None:
    text = (
        '# HELP q_total things\n# TYPE q_total counter\nq_total{cq="a"} 3.0\n'
        '# TYPE g gauge\ng 1.5\n# TYPE runs_total counter\nruns_total{job="heartbeat"} 2.0\n'
    )
    s = Samples()
    s.add_scrape(0, text, {"job": "j", "instance": "i"})
    s.add_failed_scrape(15, {"job": "j", "instance": "i"})
    assert evaluate("q_total", s, at=0) == {L(__name__="q_total", cq="a", job="j", instance="i"): 3}
    assert evaluate("g", s, at=0) == {L(__name__="g", job="j", instance="i"): 1.5}
    # the target's labels win; the sample's own job is kept as exported_job
    assert evaluate("runs_total", s, at=0) == {
        L(__name__="runs_total", exported_job="heartbeat", job="j", instance="i"): 2
    }
    assert evaluate("up", s, at=0) == {L(__name__="up", job="j", instance="i"): 1}
    assert evaluate("up", s, at=15) == {L(__name__="up", job="j", instance="i"): 0}
    with pytest.raises(ValueError, match="time order"):
        s.add(10, "up", {"job": "j", "instance": "i"}, 1)
