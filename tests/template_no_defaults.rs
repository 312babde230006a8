//! `TemplateNoDefaults`: with the gate on, kruise-manager's workload webhooks leave Pod templates as
//! the user wrote them (no Kubernetes Pod defaults), while the rest of the object is defaulted and
//! the Pods, which the apiserver defaults itself, run as usual. Own test binary: its manager owns
//! the cluster's webhook configurations.

use std::time::Duration;

use anyhow::ensure;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::statefulset::v1beta1::StatefulSet;
use kruise_e2e::cloneset_kit::{apply, cloneset, wait_converged};
use kruise_testkit::manager::ManagerOptions;
use kruise_testkit::testbed;
use kube::api::Api;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn workload_templates_keep_only_what_the_user_wrote() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager_with(&ManagerOptions {
        extra_args: vec!["--feature-gates=TemplateNoDefaults=true".into()],
        ..ManagerOptions::default()
    });
    let ns = bed.namespace("gate-nodefaults").await?;
    ns.run(async {
        apply(&ns, &cloneset("plain", 2, "nginx:alpine", json!({}))).await?;
        let statefulset = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet",
            "metadata": {"name": "plain-sts"},
            "spec": {"replicas": 1, "serviceName": "plain-sts",
                "selector": {"matchLabels": {"app": "plain-sts"}},
                "template": {"metadata": {"labels": {"app": "plain-sts"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]}}}});
        apply(&ns, &statefulset).await?;

        let cs: CloneSet = Api::namespaced(ns.client.clone(), &ns.name)
            .get("plain")
            .await?;
        let sts: StatefulSet = Api::namespaced(ns.client.clone(), &ns.name)
            .get("plain-sts")
            .await?;
        for (kind, template, replicas, history) in [
            (
                "CloneSet",
                serde_json::to_value(&cs.spec.template)?,
                cs.spec.replicas,
                cs.spec.revision_history_limit,
            ),
            (
                "StatefulSet",
                serde_json::to_value(&sts.spec.template)?,
                sts.spec.replicas,
                sts.spec.revision_history_limit,
            ),
        ] {
            let spec = &template["spec"];
            for defaulted in [
                "restartPolicy",
                "dnsPolicy",
                "schedulerName",
                "terminationGracePeriodSeconds",
            ] {
                ensure!(
                    spec.get(defaulted).is_none(),
                    "{kind} template got {defaulted}: {spec}"
                );
            }
            ensure!(
                spec["containers"][0].get("imagePullPolicy").is_none(),
                "{kind} container got an imagePullPolicy: {spec}"
            );
            // The object's own defaults still apply.
            ensure!(
                replicas.is_some() && history == Some(10),
                "{kind}: {replicas:?} {history:?}"
            );
        }
        // The Pods are defaulted by the apiserver and run.
        let (_, pods) = wait_converged(&ns, "plain", 2, TIMEOUT).await?;
        for pod in &pods {
            let spec = pod.spec.as_ref();
            ensure!(
                spec.and_then(|s| s.restart_policy.as_deref()) == Some("Always"),
                "{:?}",
                pod.metadata.name
            );
        }
        Ok(())
    })
    .await
}
