#!/usr/bin/env python3
"""Istio's standard metrics for tests/bench/scale-cost, as OpenMetrics for
tests/prometheus/up: the call graph of N namespaces bench-sc-<i> of PER bare
pods w<p> each (pod w<p> is its own workload, behind Service s<p % 10>).

Every workload calls two Services of its own namespace and one of two hubs
(s0 and s1 of namespace 0) over HTTP; one in ten also opens TCP connections
to s9 of the next namespace. Each call is reported by the source and by the
destination proxy, with the labels Istio's standard metrics carry; three
samples per series, ten minutes apart, the last END seconds ago.

usage: scale-cost-metrics.py NAMESPACES PODS_PER_NS OUT.om
"""
import sys
import time

SERVICES = 10


def labels(reporter, src_ns, src, dst_ns, svc, dst, proto):
    d = {
        "reporter": reporter,
        "source_workload": src,
        "source_workload_namespace": src_ns,
        "source_principal": f"spiffe://cluster.local/ns/{src_ns}/sa/{src}",
        "source_app": src,
        "source_version": "v1",
        "source_canonical_service": src,
        "source_canonical_revision": "v1",
        "source_cluster": "Kubernetes",
        "destination_workload": dst,
        "destination_workload_namespace": dst_ns,
        "destination_principal": f"spiffe://cluster.local/ns/{dst_ns}/sa/{dst}",
        "destination_app": dst,
        "destination_version": "v1",
        "destination_service": f"{svc}.{dst_ns}.svc.cluster.local",
        "destination_service_name": svc,
        "destination_service_namespace": dst_ns,
        "destination_canonical_service": dst,
        "destination_canonical_revision": "v1",
        "destination_cluster": "Kubernetes",
        "request_protocol": proto,
        "connection_security_policy": "mutual_tls" if reporter == "destination" else "unknown",
        "response_flags": "-",
    }
    if proto == "http":
        d["response_code"] = "200"
    return ",".join(f'{k}="{v}"' for k, v in d.items())


def edges(n, per):
    """(src_ns, src, dst_ns, svc, dst, proto) for every call."""
    for i in range(n):
        ns = f"bench-sc-{i}"
        for p in range(per):
            src = f"w{p}"
            # The pod behind Service s<j> that answers: one of those with p % 10 == j.
            back = lambda j: f"w{j + SERVICES * (p % (per // SERVICES))}"
            for j in ((p + 1) % SERVICES, (p + 4) % SERVICES):
                yield ns, src, ns, f"s{j}", back(j), "http"
            hub = p % 2
            yield ns, src, "bench-sc-0", f"s{hub}", f"w{hub}", "http"
            if p % SERVICES == 0:
                nxt = f"bench-sc-{(i + 1) % n}"
                yield ns, src, nxt, "s9", back(9), "tcp"


def main():
    n, per, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    end = int(time.time()) - 120
    stamps = [end - 1200, end - 600, end]
    calls = list(edges(n, per))
    families = [
        ("istio_requests", "Total requests.", "http", [10, 250, 500]),
        ("istio_tcp_connections_opened", "Total TCP connections opened.", "tcp", [2, 40, 80]),
        ("istio_tcp_connections_closed", "Total TCP connections closed.", "tcp", [1, 38, 78]),
    ]
    series = 0
    with open(out, "w") as f:
        for fam, help_, proto, values in families:
            f.write(f"# HELP {fam} {help_}\n# TYPE {fam} counter\n")
            for c in calls:
                if c[5] != proto:
                    continue
                for reporter in ("source", "destination"):
                    ls = labels(reporter, *c)
                    series += 1
                    for t, v in zip(stamps, values):
                        f.write(f"{fam}_total{{{ls}}} {v} {t}\n")
        f.write("# EOF\n")
    http = sum(1 for c in calls if c[5] == "http")
    print(f"{series} series: {http} HTTP calls, {len(calls) - http} TCP calls, each reported twice", file=sys.stderr)


if __name__ == "__main__":
    main()
