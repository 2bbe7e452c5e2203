//! The deploy documents in deploy/: what Kubernetes, Knative and Cloud Run would accept,
//! checked offline.

use std::process::Command;

fn deploy(file: &str) -> String {
    format!("{}/deploy/{file}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_kubernetes_manifests_pass_the_api_schemas_strictly() {
    // PyPI's kubernetes-validate bundles the API's schemas: scripts/test.sh installs it.
    let checked = Command::new("kubernetes-validate")
        .args(["--strict", "--quiet"])
        .arg(deploy("kubernetes.yaml"))
        .output()
        .expect("kubernetes-validate is missing: pip install kubernetes-validate (scripts/test.sh does)");
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// Knative's and Cloud Run's Service are custom resources kubernetes-validate holds no
/// schema of: each is read as YAML and held to what the runtime needs of it.
#[test]
fn the_knative_and_cloud_run_services_serve_plain_http_with_the_runtimes_probes() {
    let script = r#"
import sys, yaml
for path in sys.argv[1:]:
    doc = yaml.safe_load(open(path))
    assert doc["apiVersion"] == "serving.knative.dev/v1" and doc["kind"] == "Service", path
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["WASMLOOP_PROTOCOL"] == "http", path
    assert env["WASMLOOP_ACTION"].startswith("/action/"), path
    assert "PORT" not in env, path + ": the platform sets PORT"
    probes = [p["httpGet"]["path"] for k, p in container.items() if k.endswith("Probe")]
    assert "/.well-known/wasmloop/health" in probes, path
    assert "/.well-known/wasmloop/ready" in probes, path
"#;
    let checked = Command::new("python3")
        .args([
            "-c",
            script,
            &deploy("knative.yaml"),
            &deploy("cloudrun.yaml"),
        ])
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
}
