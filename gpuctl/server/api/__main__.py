"""`gpuctl api serve` (= `python -m gpuctl.server.api`): the REST API alone (no metrics, no reconciler).

python -m gpuctl.server.api [--port 8080] [--address 0.0.0.0] [--kubeconfig K] [--context C]
                            [--api-keys-file F] [--auth-cache-seconds 10] [--audience A]
                            [--tls-cert C --tls-key K] [--workers-threads 64] [--prometheus-url URL]
python -m gpuctl.server.api --new-api-key NAME     # print a key and its entry for the keys file
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import uvicorn

from gpuctl.cluster import Cluster
from gpuctl.cluster.tls import with_reloader
from gpuctl.server import flags
from gpuctl.server.api import deps
from gpuctl.server.api.app import create_app
from gpuctl.server.api.auth import ApiKeys, Authenticator, hash_key, new_api_key
from gpuctl.service.errors import ServiceError
from gpuctl.service.prometheus import configured
from gpuctl.spec import SpecError


def build_parser() -> argparse.ArgumentParser:
    """The API's flags: gpuctl.server.flags' groups, the same as `gpuctl serve --api`'s."""
    p = argparse.ArgumentParser(prog="python -m gpuctl.server.api", description="gpuctl's REST API")
    flags.add_listener(p, 8080)
    flags.add_cluster(p)
    flags.add_api_auth(p)
    flags.add_tls(p)
    flags.add_prometheus(p)
    flags.add_log_level(p)
    p.add_argument(
        "--new-api-key", metavar="NAME", help="print a new API key and its keys-file entry, then exit"
    )
    return p


def connect(kubeconfig: str | None, context: str | None, pool_size: int):
    """The cluster connection, with an HTTP connection pool as large as the worker pool (the default,
    CPUs x 5, would make busy threads open and drop connections)."""
    return Cluster.connect(kubeconfig, context, pool_size=pool_size)


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    parser = build_parser()
    if prog:
        parser.prog = prog
    args = parser.parse_args(argv)
    if args.new_api_key:
        key = new_api_key()
        print(f"key (give it to the client; it is not stored): {key}")
        print("entry for the keys file:")
        print(f'- name: {args.new_api_key}\n  sha256: "{hash_key(key)}"\n  groups: []')
        return 0
    reloader, code = flags.tls_reloader(args)
    if code:
        return code
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    deps.THREADS = args.threads
    try:
        cluster = connect(args.kubeconfig, args.context, args.threads)
        keys = ApiKeys(args.api_keys_file) if args.api_keys_file else None
        auth = Authenticator(
            lambda: cluster, api_keys=keys, ttl=args.auth_cache_seconds, audiences=args.audience
        )
        app = create_app(lambda: cluster, auth, prometheus=configured(args.prometheus_url))
        if reloader is not None:
            app.router.lifespan_context = with_reloader(app.router.lifespan_context, reloader)
    except (ConnectionError, FileNotFoundError, OSError, ValueError, SpecError, ServiceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    logging.getLogger("gpuctl.api").info(
        "gpuctl API on %s:%d (%s)",
        args.address,
        args.port,
        f"{len(keys)} API keys" if keys else "no API keys",
    )
    tls: dict = {}
    if reloader is not None:
        tls = {
            "ssl_certfile": reloader.cert,
            "ssl_keyfile": reloader.key,
            "ssl_context_factory": reloader.factory,
        }
    uvicorn.run(app, host=args.address, port=args.port, log_level=args.log_level, access_log=False, **tls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
