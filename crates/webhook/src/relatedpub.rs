//! `kruise.io/related-pub` on Pods being created (upstream's `pubMutatingPod`): the Pod webhook
//! names the PodUnavailableBudget that guards a new Pod at once, so the Pod is guarded from its first
//! moment rather than from when the budget controller next sees it. A Pod whose deletion or eviction
//! the budget guards is also labelled `policy.kruise.io/guarded` (kruise-rs only): its deletion goes
//! to the webhook that fails closed, so the budget holds while the manager is down.
//!
//! Budgets are read from the process's watch cache; a Pod in a namespace without budgets costs
//! nothing. Only a Pod owned by a ReplicaSet, in a namespace with a budget that has a targetRef,
//! costs a read (the ReplicaSet, for its Deployment; one for the Pods of a ReplicaSet that arrive
//! together, [`crate::replicaset_owners`]). Whatever cannot be read leaves the Pod
//! unannotated, never refused: the controller annotates it when it sees it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_api::policy::{POD_GUARDED_LABEL, POD_GUARDED_VALUE, POD_RELATED_PUB_ANNOTATION};
use kruise_core::podunavailablebudget::matching::{WorkloadRef, budget_for_pod};
use kube::Client;
use kube::runtime::reflector::Store;

use crate::replicaset_owners::ReplicaSetOwners;

/// The budgets the Pod webhook reads, and the ReplicaSets of Deployments.
#[derive(Clone)]
pub struct RelatedPub {
    budgets: Store<PodUnavailableBudget>,
    owners: Arc<ReplicaSetOwners>,
}

impl RelatedPub {
    /// Over the `budgets` cache, reading ReplicaSets through `client` (none found without one).
    pub fn new(budgets: Store<PodUnavailableBudget>, client: Option<Client>) -> Self {
        Self {
            budgets,
            owners: Arc::new(ReplicaSetOwners::new(client)),
        }
    }

    /// Reads ReplicaSets through `owners` (the one the Pod webhook's other steps share).
    pub fn with_owners(mut self, owners: Arc<ReplicaSetOwners>) -> Self {
        self.owners = owners;
        self
    }

    /// Names the budget that guards `pod` (in `namespace`) in its `kruise.io/related-pub`
    /// annotation, and labels it `policy.kruise.io/guarded` when the budget guards its removal;
    /// whether the Pod changed.
    pub async fn annotate(&self, pod: &mut Pod, namespace: &str) -> bool {
        let mut budgets: Vec<_> = self
            .budgets
            .state()
            .into_iter()
            .filter(|b| b.metadata.namespace.as_deref() == Some(namespace))
            .collect();
        // By name, as the apiserver lists them: the same Pod always names the same budget.
        budgets.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        if budgets.is_empty() {
            return false;
        }
        let workload = if budgets.iter().any(|b| b.spec.target_reference.is_some()) {
            self.workload_of(pod, namespace).await
        } else {
            None
        };
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let Some(budget) = budget_for_pod(budgets.iter().map(|b| &**b), &labels, workload.as_ref())
        else {
            return false;
        };
        let Some(name) = budget.metadata.name.clone() else {
            return false;
        };
        let mut changed = false;
        if kruise_core::podunavailablebudget::guards_removal(
            budget.metadata.annotations.as_ref(),
            pod,
        ) && !kruise_core::podunavailablebudget::is_labelled_guarded(pod)
        {
            pod.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(POD_GUARDED_LABEL.into(), POD_GUARDED_VALUE.into());
            changed = true;
        }
        let annotations = pod
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        changed |=
            annotations.insert(POD_RELATED_PUB_ANNOTATION.to_string(), name.clone()) != Some(name);
        changed
    }

    /// The workload that controls `pod`: a ReplicaSet's controlling Deployment, else the owner.
    async fn workload_of(&self, pod: &Pod, namespace: &str) -> Option<WorkloadRef> {
        let owner = kruise_core::ownership::controller_of(&pod.metadata)?;
        let as_ref = |o: &OwnerReference| WorkloadRef {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
        };
        if owner.kind != "ReplicaSet" || !owner.api_version.starts_with("apps/") {
            return Some(as_ref(owner));
        }
        match self.owners.controller_of(namespace, owner).await {
            Ok(controller) => Some(controller.as_ref().map_or_else(|| as_ref(owner), as_ref)),
            Err(error) => {
                tracing::warn!(%error, namespace, replicaset = %owner.name, "cannot read a new Pod's ReplicaSet; kruise.io/related-pub is left to the controller");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;
    use serde_json::json;

    fn store(budgets: &[serde_json::Value]) -> Store<PodUnavailableBudget> {
        let mut writer: Writer<PodUnavailableBudget> = Writer::default();
        let store = writer.as_reader();
        for budget in budgets {
            let budget = serde_json::from_value(budget.clone()).expect("budget");
            writer.apply_watcher_event(&watcher::Event::Apply(budget));
        }
        store
    }

    fn pod(owner: Option<serde_json::Value>) -> Pod {
        let mut metadata = json!({"name": "p", "namespace": "ns", "labels": {"app": "web"}});
        if let Some(owner) = owner {
            metadata["ownerReferences"] = json!([owner]);
        }
        serde_json::from_value(json!({"metadata": metadata})).expect("pod")
    }

    fn related(pod: &Pod) -> Option<&str> {
        pod.metadata
            .annotations
            .as_ref()?
            .get(POD_RELATED_PUB_ANNOTATION)
            .map(String::as_str)
    }

    #[tokio::test]
    async fn a_new_pod_names_its_budget_and_other_namespaces_are_ignored() {
        let budgets = store(&[
            json!({"metadata": {"name": "elsewhere", "namespace": "other"},
                   "spec": {"selector": {"matchLabels": {"app": "web"}}}}),
            json!({"metadata": {"name": "by-target", "namespace": "ns"},
                   "spec": {"targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web"}}}),
            json!({"metadata": {"name": "by-selector", "namespace": "ns"},
                   "spec": {"selector": {"matchLabels": {"app": "web"}}}}),
        ]);
        let related_pub = RelatedPub::new(budgets, None);

        let mut owned = pod(Some(
            json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet",
                                        "name": "web", "uid": "u", "controller": true}),
        ));
        assert!(related_pub.annotate(&mut owned, "ns").await);
        assert_eq!(related(&owned), Some("by-target"));
        assert!(kruise_core::podunavailablebudget::is_labelled_guarded(
            &owned
        ));
        // Annotating again changes nothing.
        assert!(!related_pub.annotate(&mut owned, "ns").await);

        // A ReplicaSet's Pod without a client to read the ReplicaSet: by selector only.
        let mut bare = pod(Some(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                       "name": "web-1", "uid": "u", "controller": true})));
        assert!(related_pub.annotate(&mut bare, "ns").await);
        assert_eq!(related(&bare), Some("by-selector"));

        let mut lonely = pod(None);
        assert!(!related_pub.annotate(&mut lonely, "empty-ns").await);
        assert_eq!(related(&lonely), None);
        assert!(!kruise_core::podunavailablebudget::is_labelled_guarded(
            &lonely
        ));
    }

    #[tokio::test]
    async fn only_a_pod_whose_removal_is_guarded_is_labelled_guarded() {
        let budgets = store(&[json!({
            "metadata": {"name": "updates-only", "namespace": "ns",
                         "annotations": {"kruise.io/pub-protect-operations": "UPDATE"}},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}})]);
        let related_pub = RelatedPub::new(budgets, None);
        let mut updated_only = pod(None);
        assert!(related_pub.annotate(&mut updated_only, "ns").await);
        assert_eq!(related(&updated_only), Some("updates-only"));
        assert!(!kruise_core::podunavailablebudget::is_labelled_guarded(
            &updated_only
        ));

        let budgets = store(&[json!({
            "metadata": {"name": "all", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}})]);
        let related_pub = RelatedPub::new(budgets, None);
        let mut opted_out = pod(None);
        opted_out.metadata.annotations =
            Some([("pub.kruise.io/no-protect".to_string(), "true".to_string())].into());
        assert!(related_pub.annotate(&mut opted_out, "ns").await);
        assert!(!kruise_core::podunavailablebudget::is_labelled_guarded(
            &opted_out
        ));
    }
}
