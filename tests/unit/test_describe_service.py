"""`describe job`'s Service line reads as kubectl describe service does (issue 42: a headless Service
read `ClusterIP ... nodePort None`)."""

from gpuctl.cli.describe import _service_line


def test_a_headless_service_says_so_and_has_no_node_port() -> None:
    s = {"name": "svc-nb", "type": "ClusterIP", "clusterIP": "None", "port": 8888, "targetPort": 8888}
    assert _service_line({**s, "nodePort": None}) == "svc-nb ClusterIP None (headless) 8888->8888"


def test_a_node_port_service_shows_its_ip_and_node_port() -> None:
    s = {"name": "svc-x", "type": "NodePort", "clusterIP": "10.0.0.7", "port": 80, "targetPort": 8080}
    assert _service_line({**s, "nodePort": 30080}) == "svc-x NodePort 10.0.0.7 80->8080 nodePort 30080"
