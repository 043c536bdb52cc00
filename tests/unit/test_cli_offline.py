"""The CLI without a cluster: dry-run printing, version, errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuctl.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


def test_training_dry_run_yaml(capsys) -> None:
    assert main(["create", "-f", str(EX / "training.yaml"), "--dry-run=client", "-o", "yaml"]) == 0
    (job,) = list(yaml.safe_load_all(capsys.readouterr().out))
    assert job["kind"] == "Job" and job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "gpuctl-medium"
    assert job["spec"]["template"]["spec"]["nodeSelector"]["runwhere.ai/pool"] == "training-pool"


@pytest.mark.parametrize("form", ["--dry-run", "--dry-run=client"])
def test_client_dry_run_of_a_job_create_prints_the_lines_without_a_cluster(form, capsys) -> None:
    files = ["-f", str(EX / "training.yaml"), "-f", str(EX / "compute.yaml"), "-f", str(EX / "notebook.yaml")]
    assert main(["create", *files, form]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "job.batch/llama-finetune created (dry run)",
        "deployment.apps/nginx-web created (dry run)",
        "service/svc-nginx-web created (dry run)",
        "statefulset.apps/alice-notebook created (dry run)",
        "service/svc-alice-notebook created (dry run)",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["create", "-f", str(EX / "pools.yaml"), "--dry-run"],  # a pool's checks read the nodes
        ["apply", "-f", str(EX / "training.yaml"), "--dry-run=client"],  # created or configured?
        ["delete", "-f", str(EX / "training.yaml"), "--dry-run"],
        ["delete", "job", "x", "--dry-run"],
        ["label", "node", "n1", "pool=p", "--dry-run"],
        ["create", "-f", str(EX / "training.yaml"), "--dry-run=server"],
    ],
)
def test_dry_runs_that_need_the_cluster_say_so(argv, capsys) -> None:
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "no cluster configured" in captured.err


def test_repeated_f_keeps_every_file(capsys) -> None:
    rc = main(
        [
            "apply",
            "-f",
            str(EX / "training.yaml"),
            "-f",
            str(EX / "compute.yaml"),
            str(EX / "notebook.yaml"),
            "--dry-run=client",
            "-o",
            "json",
        ]
    )
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "List"
    assert [o["kind"] for o in doc["items"]] == ["Job", "Deployment", "Service", "StatefulSet", "Service"]


def test_pool_and_quota_dry_run_print_kueue_objects(capsys) -> None:
    assert (
        main(
            [
                "create",
                "-f",
                str(EX / "pools.yaml"),
                "-f",
                str(EX / "quota.yaml"),
                "--dry-run=client",
                "-o",
                "yaml",
            ]
        )
        == 0
    )
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    kinds = [o["kind"] for o in objs]
    assert kinds.count("ResourceFlavor") == 4
    assert kinds.count("ClusterQueue") == 2 and kinds.count("LocalQueue") == 2
    nodes = {o["metadata"]["name"]: o["metadata"]["labels"] for o in objs if o["kind"] == "Node"}
    assert nodes["gpu-node-1"] == {"runwhere.ai/pool": "training-pool", "runwhere.ai/gpu-type": "A100-100G"}
    assert nodes["cpu-node-1"]["runwhere.ai/pool"] == "compute-pool"
    cq = next(o for o in objs if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "team-b")
    budget = cq["spec"]["resourceGroups"][-1]["flavors"][0]["resources"]
    assert {
        "name": "runwhere.ai/quota-gpu-840ths",
        "nominalQuota": str(8 * 840),
        "borrowingLimit": "0",
    } in budget


def test_broken_file_names_file_field_and_fix(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kind: training\njob: {name: Bad_Name}\nenvironment: {image: x}\nresources: {cpu: abc, memory: 1Gi}\n"
    )
    assert main(["create", "-f", str(bad), "--dry-run=client", "-o", "yaml"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert str(bad) in err and "document 1" in err
    assert "job.name" in err and "resources.cpu" in err
    assert "fix:" in err


@pytest.mark.parametrize("value", ["banana", "50%", "9g.10gb", "0"])
def test_a_bad_gpu_share_is_refused_offline_naming_file_field_and_fix(value, tmp_path, capsys) -> None:
    """The gpu-share grammar is the spec's (gpuctl.spec.share): a value that is neither a memory size nor a
    MIG profile is refused when the file is loaded, before any cluster is asked."""
    bad = tmp_path / "share.yaml"
    bad.write_text(
        (EX / "compute.yaml").read_text()
        + "\n---\nkind: notebook\njob: {name: nb}\nenvironment: {image: x}\n"
        + f"resources: {{pool: mig, cpu: 1, memory: 1Gi, gpu-share: '{value}'}}\n"
    )
    assert main(["create", "-f", str(bad), "--dry-run=client"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        f"{bad}: document 2: resources.gpu-share: {value!r} is neither a GPU memory size (10Gi) nor a MIG "
        "profile (1g.10gb) (fix: write a GPU memory size such as 10Gi, or a MIG profile such as 1g.10gb"
    ) in captured.err, captured.err


def test_one_bad_document_prints_nothing_of_the_good_ones(tmp_path, capsys) -> None:
    f = tmp_path / "two.yaml"
    f.write_text((EX / "compute.yaml").read_text() + "\n---\nkind: training\njob: {name: x}\n")
    assert main(["create", "-f", str(f), "--dry-run=client", "-o", "yaml"]) == 1
    assert capsys.readouterr().out == ""


def test_missing_file_exits_1(capsys) -> None:
    assert main(["create", "-f", "/nonexistent.yaml", "--dry-run=client", "-o", "yaml"]) == 1
    assert "/nonexistent.yaml" in capsys.readouterr().err


def test_cluster_flags_before_the_verb(capsys) -> None:
    args = build_parser().parse_args(["--kubeconfig", "/k", "-n", "team-a", "get", "jobs"])
    assert (args.global_kubeconfig, args.global_namespace, args.kubeconfig) == ("/k", "team-a", None)
    assert main(["--kubeconfig", "/nonexistent", "get", "pools"]) == 1
    assert "kubeconfig /nonexistent not found" in capsys.readouterr().err


def test_version_client(capsys) -> None:
    assert main(["version", "--client"]) == 0
    assert capsys.readouterr().out.startswith("gpuctl version: ")


def test_no_cluster_gives_a_clear_error(capsys) -> None:
    assert main(["create", "-f", str(EX / "training.yaml")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_unknown_key_warns_and_strict_fails(tmp_path, capsys) -> None:
    f = tmp_path / "typo.yaml"
    f.write_text(
        "kind: compute\njob: {name: web}\nenvironment: {image: nginx}\n"
        "resources: {cpu: 1, memory: 1Gi, gpus: 1}\n"
    )
    assert main(["create", "-f", str(f), "--dry-run=client", "-o", "yaml"]) == 0
    assert "gpus" in capsys.readouterr().err
    assert main(["create", "-f", str(f), "--dry-run=client", "-o", "yaml", "--strict"]) == 1


def test_logs_prints_every_line_unless_tail_is_given() -> None:
    """kubectl's default: no tailLines asked of the API server (the earlier client kept the last 100)."""
    from gpuctl.cli.logs import log_options

    assert log_options(build_parser().parse_args(["logs", "j"]))["tail"] == -1
    assert log_options(build_parser().parse_args(["logs", "j", "--tail", "5"]))["tail"] == 5
