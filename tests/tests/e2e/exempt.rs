//! `audit` and `meshscope.io/exempt`: the findings of an object the
//! webhook admits as exempt are listed as exempt with the annotation's
//! reason, in the table and in JSON, and never count toward `--fail-on`.
//! Offline, on manifests written here.

use kubectl_meshscope::Outcome;
use meshscope_e2e::run::meshscope;
use meshscope_test_support::audit_json::codes_and_names;

/// A DNS ServiceEntry without exportTo (MS0002), with `annotations`.
fn service_entry(name: &str, annotations: &str) -> String {
    format!(
        "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  namespace: shop\n{annotations}spec:\n  hosts: [{name}.example.com]\n  ports: [{{number: 443, name: tls, protocol: TLS}}]\n  resolution: DNS\n  location: MESH_EXTERNAL\n"
    )
}

fn manifests(dir: &std::path::Path) -> String {
    let yaml = [
        "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {istio-injection: enabled}\n".to_string(),
        service_entry(
            "payments",
            "  annotations:\n    meshscope.io/exempt: \"the egress gateway resolves it; exportTo in Q3\"\n",
        ),
        service_entry("maps", ""),
        service_entry("blank", "  annotations:\n    meshscope.io/exempt: \" \"\n"),
    ]
    .concat();
    let path = dir.join("manifests.yaml");
    std::fs::write(&path, yaml).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn exempt_findings_are_listed_with_their_reason_and_never_fail_the_audit() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifests(dir.path());

    let r = meshscope(&[
        "audit",
        "--manifests",
        &m,
        "--fail-on",
        "warning",
        "-o",
        "json",
    ]);
    assert_eq!(r.ok(), Outcome::Findings, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        codes_and_names(&r.stdout),
        [
            ("MS0002".to_string(), "blank".to_string()),
            ("MS0002".to_string(), "maps".to_string())
        ]
    );
    let exempt = v["exempt"].as_array().unwrap();
    assert_eq!(exempt.len(), 1, "{}", r.stdout);
    assert_eq!(exempt[0]["code"], "MS0002");
    assert_eq!(exempt[0]["name"], "payments");
    assert_eq!(
        exempt[0]["exempt"],
        "the egress gateway resolves it; exportTo in Q3"
    );
    assert_eq!(v["summary"]["warnings"], 2);
    assert_eq!(v["summary"]["exempt"], 1);
    assert!(v["findings"][0].get("exempt").is_none(), "{}", r.stdout);
    // An empty reason exempts nothing, as in the webhook, which says so.
    assert!(
        r.stderr.contains(
            "warning: meshscope.io/exempt on ServiceEntry shop/blank has no reason, so it is ignored"
        ),
        "{}",
        r.stderr
    );

    // With the others suppressed, only the exempt one is left: no failure,
    // and the table still shows it, with the reason.
    let r = meshscope(&[
        "audit",
        "--manifests",
        &m,
        "--fail-on",
        "warning",
        "--suppress",
        "MS0002=ServiceEntry/shop/maps",
        "--suppress",
        "MS0002=ServiceEntry/shop/blank",
    ]);
    assert_eq!(r.ok(), Outcome::Ok, "{}\n{}", r.stdout, r.stderr);
    let table: Vec<Vec<&str>> = r
        .stdout
        .lines()
        .map(|l| {
            l.split("   ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(
        table,
        [
            vec!["EXEMPT", "CODE", "KIND", "NAMESPACE", "NAME", "REASON"],
            vec![
                "warning",
                "MS0002",
                "ServiceEntry",
                "shop",
                "payments",
                "the egress gateway resolves it; exportTo in Q3"
            ],
        ],
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains("no findings (1 exempt, 2 suppressed)"),
        "{}",
        r.stderr
    );
    // -o name lists the objects with findings that count.
    let r = meshscope(&["audit", "--manifests", &m, "-o", "name"]);
    assert_eq!(
        r.stdout,
        "serviceentry.networking.istio.io/blank\nserviceentry.networking.istio.io/maps\n"
    );
}
