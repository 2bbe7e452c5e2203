//! The deploy documents in deploy/: what Kubernetes, Knative and Cloud Run would accept,
//! checked offline.

use std::process::Command;

fn deploy(file: &str) -> String {
    format!("{}/deploy/{file}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs a check written in Python (PyYAML reads the manifests) with `args`; its failure,
/// with what it printed, fails the test.
fn python(script: &str, args: &[&str]) {
    let checked = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
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
    python(script, &[&deploy("knative.yaml"), &deploy("cloudrun.yaml")]);
}

/// Each manifest's numbers fit together for a rolling update that loses nothing: the drain
/// (the manifest's `WASMLOOP_DRAIN_PERIOD`, or the default) outlasts the time a readiness
/// probe takes to take the pod out (its period times its failure threshold, Kubernetes'
/// defaults where none is given) plus a margin for the endpoints to follow; and the drain
/// plus `--shutdown-timeout` ends before the platform's grace period kills the container
/// (Kubernetes' `terminationGracePeriodSeconds`, default 30; Knative's is the revision's
/// `timeoutSeconds`; Cloud Run's a fixed 10 s).
#[test]
fn every_manifests_drain_outlasts_its_readiness_probe_and_ends_within_its_grace_period() {
    let script = r#"
import re, sys, yaml
default_drain, default_shutdown = sys.argv[1], sys.argv[2]
MARGIN = 5  # seconds for the endpoints (kube-proxy, an ingress) to follow a failed probe

def seconds(text):
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*(ms|s|m)", text):
        total += float(number) * {"ms": 0.001, "s": 1, "m": 60}[unit]
    return total

for path in sys.argv[3:]:
    (doc, *_) = [d for d in yaml.safe_load_all(open(path)) if d["kind"] in ("Deployment", "Service") and "template" in d["spec"]]
    pod = doc["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
    drain = seconds(env.get("WASMLOOP_DRAIN_PERIOD", default_drain))
    shutdown = seconds(env.get("WASMLOOP_SHUTDOWN_TIMEOUT", default_shutdown))
    if doc["apiVersion"].startswith("apps/"):
        grace = pod.get("terminationGracePeriodSeconds", 30)
    elif any(k.startswith("run.googleapis.com/") for k in doc["spec"]["template"]["metadata"].get("annotations", {})):
        grace = 10
    else:
        grace = pod.get("timeoutSeconds", 300)
    probe = container.get("readinessProbe")
    if probe is not None:
        out_after = probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
        assert drain >= out_after + MARGIN, (
            f"{path}: a drain of {drain}s ends before the endpoints stop routing here "
            f"({out_after}s of failed probes + {MARGIN}s): raise WASMLOOP_DRAIN_PERIOD")
    assert drain + shutdown < grace, (
        f"{path}: drain {drain}s + shutdown {shutdown}s is not within the grace period "
        f"of {grace}s: the container would be killed with requests in flight")
    print(f"{path}: drain {drain}s, shutdown {shutdown}s, grace {grace}s")
"#;
    python(
        script,
        &[
            wasmloop::config::DEFAULT_HTTP_DRAIN_PERIOD,
            wasmloop::config::DEFAULT_SHUTDOWN_TIMEOUT,
            &deploy("kubernetes.yaml"),
            &deploy("knative.yaml"),
            &deploy("cloudrun.yaml"),
        ],
    );
}
