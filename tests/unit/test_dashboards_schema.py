"""The Grafana dashboards (manifests/grafana/*.json) against Grafana's own schema, a linter's rules,
and Prometheus' PromQL parser.

Schema: Grafana's dashboard schema as Grafana publishes it in code, the grafana-foundation-sdk models
for Grafana 11.6 (generated from Grafana's schemas; panel options, field config and Prometheus queries
are typed per plugin). Each dashboard is decoded into those models and encoded back: a key the schema
does not know is dropped, a value of the wrong shape changes, and the test names its JSON path.
Lint: the rules of Grafana's dashboard-linter that apply here (its Go module is not served by the
module proxy): every panel and query uses the `${datasource}` variable, rate() uses
$__rate_interval (increase() also $__range), unique panel ids and dashboard uids, panels inside the
24-column grid without overlapping. PromQL: every panel query, variables substituted, through
`promtool check rules`. That every query returns data from a real Prometheus is
tests/integration/test_metrics.py. No Grafana server runs in CI: none is installable from the
registries this project uses (docs/metrics.md).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

ROOT = Path(__file__).resolve().parents[2]
BOARDS = sorted((ROOT / "manifests/grafana").glob("*.json"))
# Written by Grafana itself but outside the dashboard schema: `__inputs` (the "export for sharing
# externally" header Grafana's import reads to ask for the datasource) and a query variable's
# `definition` (the query text Grafana's variable editor shows).
OUTSIDE_SCHEMA = [re.compile(r"^\$\.__inputs$"), re.compile(r"^\$\.templating\.list\[\d+\]\.definition$")]

plugins.register_default_plugins()


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def schema_differences(board: dict) -> list[str]:
    """JSON paths where decoding into Grafana's models and encoding back loses or changes something."""
    back = json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))

    def walk(a: object, b: object, where: str) -> list[str]:
        if isinstance(a, dict):
            if not isinstance(b, dict):
                return [f"{where}: an object in the dashboard, {type(b).__name__} in the schema"]
            out = []
            for k, v in a.items():
                path = f"{where}.{k}"
                if k not in b:
                    if not any(p.match(path) for p in OUTSIDE_SCHEMA):
                        out.append(f"{path}: not in Grafana's schema")
                else:
                    out += walk(v, b[k], path)
            return out
        if isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return [f"{where}: the list changes through the schema"]
            return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in walk(x, y, f"{where}[{i}]")]
        return [] if a == b else [f"{where}: {a!r} becomes {b!r} through the schema"]

    return walk(board, back, "$")


def test_there_are_dashboards() -> None:
    assert [p.name for p in BOARDS] == ["gpu-pools.json", "queue.json", "teams.json"]


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.name)
def test_dashboard_matches_grafanas_schema(path: Path) -> None:
    assert schema_differences(_load(path)) == []


def test_schema_check_finds_typos_at_every_level() -> None:
    """The check can fail: misspelt keys in the dashboard, a panel, its options, its field config
    (plugin-typed) and a Prometheus query are each reported by path."""
    board = _load(ROOT / "manifests/grafana/gpu-pools.json")
    i, panel = next((i, p) for i, p in enumerate(board["panels"]) if p["type"] == "timeseries")
    panel["options"]["legnd"] = {}
    panel["fieldConfig"]["defaults"]["unti"] = "short"
    panel["fieldConfig"]["defaults"].setdefault("custom", {})["lineWidht"] = 2
    panel["targets"][0]["exprr"] = "up"
    panel["gridPos"]["wdth"] = 3
    board["refresh_"] = "30s"
    got = schema_differences(board)
    p = f"$.panels[{i}]"
    assert sorted(got) == sorted(
        [
            f"{p}.options.legnd: not in Grafana's schema",
            f"{p}.fieldConfig.defaults.unti: not in Grafana's schema",
            f"{p}.fieldConfig.defaults.custom.lineWidht: not in Grafana's schema",
            f"{p}.targets[0].exprr: not in Grafana's schema",
            f"{p}.gridPos.wdth: not in Grafana's schema",
            "$.refresh_: not in Grafana's schema",
        ]
    )


def lint(board: dict) -> list[str]:
    problems = []
    ds = {"type": "prometheus", "uid": "${datasource}"}
    variables = {v["name"]: v for v in board["templating"]["list"]}
    if variables.get("datasource", {}).get("type") != "datasource":
        problems.append("no `datasource` variable of type datasource")
    for v in board["templating"]["list"]:
        if v["type"] == "query" and v.get("datasource") != ds:
            problems.append(f"variable {v['name']}: datasource is not ${{datasource}}")
    ids = [p["id"] for p in board["panels"]]
    if len(ids) != len(set(ids)):
        problems.append(f"duplicate panel ids {sorted(i for i in ids if ids.count(i) > 1)}")
    cells: dict[tuple[int, int], str] = {}
    for p in board["panels"]:
        name = f"panel {p['id']} {p.get('title')!r}"
        if not p.get("title"):
            problems.append(f"{name}: no title")
        g = p["gridPos"]
        if g["x"] < 0 or g["x"] + g["w"] > 24:
            problems.append(f"{name}: outside the 24-column grid")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    problems.append(f"{name}: overlaps {cells[(x, y)]}")
                    break
                cells[(x, y)] = name
            else:
                continue
            break
        if p["type"] == "row":
            continue
        if p.get("datasource") != ds:
            problems.append(f"{name}: datasource is not ${{datasource}}")
        for t in p.get("targets") or []:
            if t.get("datasource") != ds:
                problems.append(f"{name} query {t.get('refId')}: datasource is not ${{datasource}}")
            for fn in re.findall(r"\b(rate|increase|irate)\(([^()]*(?:\([^()]*\))?[^()]*)\)", t["expr"]):
                # increase() over the whole time range is the one exception (stat panels "in range").
                ok = ["[$__rate_interval]"] + (["[$__range]"] if fn[0] == "increase" else [])
                if not any(w in fn[1] for w in ok):
                    problems.append(f"{name} query {t.get('refId')}: {fn[0]}() without [$__rate_interval]")
    problems += cluster_filter_problems(board)
    return problems


# Several clusters (gpuctl serve --cluster, docs/metrics.md): every series selector of every panel query and
# query variable filters on the `cluster` variable, whose All is `.*` (an absent label matches it, so one
# cluster without the label keeps working).
CLUSTER_FILTER = 'cluster=~"$cluster"'
# A metric name in PromQL: gpuctl's, DCGM's, Kueue's, kube-state-metrics', or a recording rule's.
METRIC_NAME = re.compile(r"\b(?:gpuctl_|DCGM_|kueue_|kube_)\w+|\b\w+:\w+:\w+")


def cluster_filter_problems(board: dict) -> list[str]:
    problems = []
    variables = {v["name"]: v for v in board["templating"]["list"]}
    cluster = variables.get("cluster", {})
    if not (cluster.get("type") == "query" and cluster.get("includeAll") and cluster.get("allValue") == ".*"):
        problems.append("no `cluster` query variable with All = .*")
    exprs = [(f"variable {v['name']}", v["query"]["query"]) for v in board["templating"]["list"]
             if v["type"] == "query" and v["name"] != "cluster"]  # fmt: skip
    exprs += [(f"panel {p['id']} {p.get('title')!r} query {t.get('refId')}", t["expr"])
              for p in board["panels"] for t in p.get("targets") or []]  # fmt: skip
    for where, expr in exprs:
        code = re.sub(r'"[^"]*"', '""', expr)  # label values and label_replace's strings are not selectors
        selectors = re.findall(r"\{[^{}]*\}", expr)
        bare = [m.group() for m in METRIC_NAME.finditer(code) if not code[m.end() :].startswith("{")]
        if bare or not selectors or any(CLUSTER_FILTER not in s for s in selectors):
            problems.append(f"{where}: a series selector without {CLUSTER_FILTER}")
    return problems


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.name)
def test_dashboard_lint(path: Path) -> None:
    assert lint(_load(path)) == []


def test_cluster_filter_check_finds_a_query_or_variable_that_misses_it() -> None:
    """A selector without the filter, a bare metric, and a variable query without it are each named."""
    board = _load(ROOT / "manifests/grafana/gpu-pools.json")
    panels = [p for p in board["panels"] if p.get("targets")]
    panels[0]["targets"][0]["expr"] = 'sum(gpuctl_pool_free_gpus{pool=~"$pool"})'
    panels[1]["targets"][0]["expr"] = (
        'sum(gpuctl_pool_free_gpus{cluster=~"$cluster"}) / sum(gpuctl_pool_info)'
    )
    pool = next(v for v in board["templating"]["list"] if v["name"] == "pool")
    pool["query"]["query"] = "label_values(gpuctl_pool_info, pool)"
    got = cluster_filter_problems(board)
    assert got == [
        f"variable pool: a series selector without {CLUSTER_FILTER}",
        f"panel {panels[0]['id']} {panels[0]['title']!r} query A: a series selector without {CLUSTER_FILTER}",
        f"panel {panels[1]['id']} {panels[1]['title']!r} query A: a series selector without {CLUSTER_FILTER}",
    ]


def test_dashboard_uids_are_unique_and_stable() -> None:
    uids = [_load(p)["uid"] for p in BOARDS]
    assert len(set(uids)) == len(uids) and all(u.startswith("gpuctl-") for u in uids)


def test_lint_can_fail() -> None:
    board = _load(ROOT / "manifests/grafana/queue.json")
    panels = [p for p in board["panels"] if p["type"] != "row"]
    panels[0]["datasource"] = {"type": "prometheus", "uid": "prom-prod"}
    panels[1]["gridPos"] = dict(panels[0]["gridPos"])
    t = next(p for p in panels if p.get("targets"))["targets"][0]
    t["expr"] = "sum(rate(gpuctl_reconcile_runs_total[5m]))"
    board["templating"]["list"] = [v for v in board["templating"]["list"] if v["name"] != "cluster"]
    got = lint(board)
    assert any("datasource is not" in g for g in got)
    assert "no `cluster` query variable with All = .*" in got
    assert any("overlaps" in g for g in got)
    assert any("rate() without [$__rate_interval]" in g for g in got)


def test_every_panel_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query (variables replaced by values of the right kind) as a recording rule."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: apt-get install prometheus (hack/test.sh does)")
    rules = []
    for path in BOARDS:
        for p in _load(path)["panels"]:
            for t in p.get("targets") or []:
                expr = (
                    t["expr"]
                    .replace("$__rate_interval", "1m")
                    .replace("$__range", "1h")
                    .replace("$__interval", "15s")
                )
                expr = re.sub(r"\$\{?(cluster|pool|team|priority)\}?", ".*", expr)
                assert "$" not in expr.replace('"$1"', ""), (
                    f"{path.name} {p['title']}: unknown variable in {expr}"
                )
                rules.append(
                    {"record": f"check:{path.stem.replace('-', '_')}:{p['id']}_{t['refId']}", "expr": expr}
                )
    assert len(rules) >= 40
    f = tmp_path / "panels.yaml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    p = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(rules)} rules found" in p.stdout
