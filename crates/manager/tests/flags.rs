//! The manager refuses a command line OpenKruise v1.9.0's manager refuses, before it does
//! anything: the process exits with an error that names the flag.

use std::process::Command;

fn manager(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kruise-manager"))
        .args(args)
        // Nothing may be reached: the flags are refused first.
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .expect("running kruise-manager")
}

#[test]
fn an_unknown_feature_gate_keeps_the_manager_from_starting() {
    let out = manager(&["--feature-gates=PodWebhook=true,NoSuchGate=true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with an unknown gate");
    assert!(
        stderr.contains("unrecognized feature gate: NoSuchGate"),
        "stderr: {stderr}"
    );
}

#[test]
fn a_gate_value_that_is_not_a_boolean_keeps_the_manager_from_starting() {
    let out = manager(&["--feature-gates=PodWebhook=yes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with PodWebhook=yes");
    assert!(
        stderr.contains("invalid value of PodWebhook"),
        "stderr: {stderr}"
    );
}
