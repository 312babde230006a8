//! Which Pods go first: the update order (Kubernetes' ActivePods order, then the priority and scatter
//! strategies, then Pods already in PreparingUpdate) and the scale-down order (most deletable first).
//!
//! Every function works on indexes into one `&[Pod]` slice, so a caller can keep its own per-Pod data
//! alongside and nothing is cloned. All sorts are stable, so ties keep the caller's order: upstream
//! uses Go's unstable `sort.Slice`/`sort.Sort` for the base orders, which makes ties land in an
//! arbitrary order; being deterministic is a strict improvement and changes no stated rule.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::pub_types::{UpdatePriorityStrategy, UpdateScatterTerm};
use kruise_api::validation::selector_matches;

use crate::pods::{self, LifecycleState};

/// The node label that names a node; spreading over it must not reuse the same-node ranks.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

fn labels(pod: &Pod) -> &BTreeMap<String, String> {
    pod.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
}

/// Pending < Unknown < Running; any other phase ranks with Pending, as upstream's map lookup
/// defaults to 0.
fn phase_ordinal(pod: &Pod) -> u8 {
    match pods::phase(pod) {
        pods::PHASE_UNKNOWN => 1,
        pods::PHASE_RUNNING => 2,
        _ => 0,
    }
}

/// Upstream's `afterOrZero` as an order: an unknown time first, then newer before older.
fn unknown_then_newest_first(a: Option<Timestamp>, b: Option<Timestamp>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

fn creation_time(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// Ready Pods are compared by how long they have been Ready: a shorter time first.
fn ready_time_order(a: &Pod, b: &Pod) -> Ordering {
    if pods::is_ready(a) && pods::is_ready(b) {
        unknown_then_newest_first(pods::ready_since(a), pods::ready_since(b))
    } else {
        Ordering::Equal
    }
}

/// Kubernetes' `ActivePods` order, the least established Pod first: unassigned < assigned; Pending <
/// Unknown < Running; not Ready < Ready; Ready for less time < more; more restarts < fewer; unknown
/// creation time < newer < older. CloneSet updates Pods in this order, so broken Pods are fixed before
/// healthy ones are disturbed.
pub fn active_pods_cmp(a: &Pod, b: &Pod) -> Ordering {
    pods::is_assigned(a)
        .cmp(&pods::is_assigned(b))
        .then_with(|| phase_ordinal(a).cmp(&phase_ordinal(b)))
        .then_with(|| pods::is_ready(a).cmp(&pods::is_ready(b)))
        .then_with(|| ready_time_order(a, b))
        .then_with(|| pods::max_container_restarts(b).cmp(&pods::max_container_restarts(a)))
        .then_with(|| unknown_then_newest_first(creation_time(a), creation_time(b)))
}

/// The trailing decimal integer of a label value (`sts-10` gives 10, `a1b22` gives 22); 0 when there is
/// none or it does not fit in an i64.
pub fn trailing_integer(value: &str) -> i64 {
    let digits = value.len() - value.bytes().rev().take_while(u8::is_ascii_digit).count();
    value[digits..].parse().unwrap_or(0)
}

/// A Pod's place under an update priority strategy; smaller sorts first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PriorityKey {
    /// Higher weight first, so the weight is stored negated.
    Weight(i64),
    /// The position of the first ordered key the Pod carries (−1 when none: such Pods go first, as
    /// upstream does), then the trailing integer of its value, higher first (stored negated).
    Order(i64, i64),
    None,
}

fn priority_key(strategy: &UpdatePriorityStrategy, pod: &Pod) -> PriorityKey {
    let labels = labels(pod);
    if !strategy.weight_priority.is_empty() {
        let weight: i64 = strategy
            .weight_priority
            .iter()
            .filter(|term| selector_matches(&term.match_selector, labels))
            .map(|term| i64::from(term.weight))
            .sum();
        return PriorityKey::Weight(-weight);
    }
    if !strategy.order_priority.is_empty() {
        let found = strategy
            .order_priority
            .iter()
            .enumerate()
            .find_map(|(level, term)| labels.get(&term.ordered_key).map(|v| (level, v)));
        return match found {
            Some((level, value)) => PriorityKey::Order(
                i64::try_from(level).unwrap_or(i64::MAX),
                trailing_integer(value).saturating_neg(),
            ),
            None => PriorityKey::Order(-1, 0),
        };
    }
    PriorityKey::None
}

/// Stable sort by the update priority strategy: by summed weight of matching terms, higher first; or by
/// the first ordered key present (earlier keys first), then by the trailing integer of its value, higher
/// first. Pods that tie keep their order.
pub fn sort_by_priority<P: Borrow<Pod>>(
    pods: &[P],
    indexes: &mut [usize],
    strategy: &UpdatePriorityStrategy,
) {
    if strategy.weight_priority.is_empty() && strategy.order_priority.is_empty() {
        return;
    }
    // Keys are computed once per Pod; selectors are not cheap to evaluate inside a comparator.
    let mut keyed: Vec<(PriorityKey, usize)> = indexes
        .iter()
        .map(|&i| (priority_key(strategy, pods[i].borrow()), i))
        .collect();
    keyed.sort_by_key(|&(key, _)| key);
    for (slot, (_, i)) in indexes.iter_mut().zip(keyed) {
        *slot = i;
    }
}

fn matches_term(pod: &Pod, term: &UpdateScatterTerm) -> bool {
    labels(pod).get(&term.key) == Some(&term.value)
}

/// Spreads the Pods matching each scatter term over the update order, so that (for example) Pods of
/// one zone are not all updated in the same batch. With several terms, the terms matched by more waiting
/// Pods are applied first; terms no waiting Pod matches are dropped. `pods` is the whole set (the
/// density of matches is measured over it), `indexes` the Pods waiting in their current order.
pub fn scatter<P: Borrow<Pod>>(
    pods: &[P],
    mut indexes: Vec<usize>,
    terms: &[UpdateScatterTerm],
) -> Vec<usize> {
    if terms.is_empty() || indexes.len() <= 1 {
        return indexes;
    }
    for term in scatter_terms(pods, &indexes, terms) {
        indexes = scatter_by_term(pods, indexes, term);
    }
    indexes
}

fn scatter_terms<'a, P: Borrow<Pod>>(
    pods: &[P],
    indexes: &[usize],
    terms: &'a [UpdateScatterTerm],
) -> Vec<&'a UpdateScatterTerm> {
    if terms.len() == 1 {
        return terms.iter().collect();
    }
    // A repeated term (validation rejects it) is counted once, at its first position.
    let mut counted: Vec<(&UpdateScatterTerm, usize)> = Vec::new();
    for term in terms {
        if counted.iter().any(|(t, _)| *t == term) {
            continue;
        }
        let count = indexes
            .iter()
            .filter(|&&i| matches_term(pods[i].borrow(), term))
            .count();
        if count > 0 {
            counted.push((term, count));
        }
    }
    counted.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
    counted.into_iter().map(|(t, _)| t).collect()
}

/// How matched and unmatched Pods are interleaved: `group_num` rounds of `matched_size` matched then
/// `unmatched_size` unmatched Pods, after `unmatched_lead` unmatched Pods up front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ScatterGroup {
    group_num: usize,
    matched_size: usize,
    unmatched_size: usize,
    unmatched_lead: usize,
}

/// `n / d` rounded half away from zero, as Go's `math.Round` of the float quotient.
fn div_round(n: usize, d: usize) -> usize {
    (2 * n + d) / (2 * d)
}

fn even_group(matched: usize, unmatched: usize) -> ScatterGroup {
    let group_num = matched.min(unmatched);
    ScatterGroup {
        group_num,
        matched_size: div_round(matched, group_num),
        unmatched_size: div_round(unmatched, group_num),
        unmatched_lead: 0,
    }
}

/// All four counts are at least 1 here. When the waiting Pods are relatively richer in matched Pods
/// than the whole set, the group sizes of the whole set are used, so the waiting matched Pods are
/// spread as thinly as the final set will be.
fn group_by_density(
    total_matched: usize,
    total_unmatched: usize,
    wait_matched: usize,
    wait_unmatched: usize,
) -> ScatterGroup {
    // total_unmatched / total_matched >= wait_unmatched / wait_matched, exactly (upstream: float32).
    if total_unmatched * wait_matched >= wait_unmatched * total_matched {
        return even_group(wait_matched, wait_unmatched);
    }
    let total = even_group(total_matched, total_unmatched);
    let group_num = (wait_matched / total.matched_size).min(wait_unmatched / total.unmatched_size);
    ScatterGroup {
        group_num,
        matched_size: total.matched_size,
        unmatched_size: total.unmatched_size,
        unmatched_lead: wait_unmatched - group_num * total.unmatched_size,
    }
}

fn scatter_by_term<P: Borrow<Pod>>(
    pods: &[P],
    indexes: Vec<usize>,
    term: &UpdateScatterTerm,
) -> Vec<usize> {
    let (mut matched, unmatched): (Vec<usize>, Vec<usize>) = indexes
        .iter()
        .partition(|&&i| matches_term(pods[i].borrow(), term));
    if matched.len() <= 1 || unmatched.len() <= 1 {
        return indexes;
    }
    let total_matched = pods
        .iter()
        .filter(|p| matches_term((*p).borrow(), term))
        .count();
    let total_unmatched = pods.len() - total_matched;
    // The last matched Pod always goes to the very end.
    let Some(last) = matched.pop() else {
        return indexes;
    };
    let group = group_by_density(
        total_matched.saturating_sub(1).max(1),
        total_unmatched.max(1),
        matched.len(),
        unmatched.len(),
    );

    let mut out = Vec::with_capacity(indexes.len());
    let mut matched = matched.into_iter();
    let mut unmatched = unmatched.into_iter();
    out.extend(unmatched.by_ref().take(group.unmatched_lead));
    for _ in 0..group.group_num {
        out.extend(matched.by_ref().take(group.matched_size));
        out.extend(unmatched.by_ref().take(group.unmatched_size));
    }
    out.extend(matched);
    out.extend(unmatched);
    out.push(last);
    out
}

/// CloneSet's update order for the Pods waiting to update (`SortUpdateIndexes`): the ActivePods order,
/// then the priority strategy, then the scatter strategy, then Pods already in PreparingUpdate moved to
/// the front (their hooks have been asked, so finishing them first avoids leaving Pods half-way).
pub fn sort_update_indexes(
    pods: &[Pod],
    mut indexes: Vec<usize>,
    priority: Option<&UpdatePriorityStrategy>,
    scatter_terms: &[UpdateScatterTerm],
) -> Vec<usize> {
    indexes.sort_by(|&a, &b| active_pods_cmp(&pods[a], &pods[b]));
    if let Some(priority) = priority {
        sort_by_priority(pods, &mut indexes, priority);
    }
    let mut indexes = scatter(pods, indexes, scatter_terms);
    indexes.sort_by_key(|&i| pods::lifecycle_state(&pods[i]) != LifecycleState::PreparingUpdate);
    indexes
}

/// The order in which CloneSet deletes Pods already chosen for deletion (specified-delete, or
/// PreparingDelete with its hook gone): the ActivePods order, so unready Pods go before ready ones.
///
/// Upstream deletes them in its cache's (arbitrary) order and stops at the first failure. Here every
/// Pod of a round is tried, but a round is capped, and the ready-Pod allowance
/// (`within_ready_budget`) is spent in this order; an unready Pod's deletion costs no availability
/// and no PodUnavailableBudget refuses it, so putting it first replaces broken Pods before a ready
/// one (which a budget may refuse) is touched.
pub fn sort_deletions(pods: &[Pod], indexes: &mut [usize]) {
    indexes.sort_by(|&a, &b| active_pods_cmp(&pods[a], &pods[b]));
}

/// Extra scale-down ranks per Pod index: a higher rank is deleted first (after the availability and
/// deletion-cost rules). Pods absent from the map rank 0.
pub type Ranks = HashMap<usize, f64>;

/// How the deletion ranks are computed; CloneSet uses `Spread` when its template has
/// topologySpreadConstraints, else `SameNode`.
pub enum Ranker<'a> {
    /// No ranks.
    None,
    /// On a node with k > 1 candidates, all but the best get ranks k−1 … 1, so Pods crowded on one node
    /// go first.
    SameNode,
    /// For each topology key, Pods are grouped by the label value of their node and ranked within each
    /// group; ranks are weighted by ln(number of values + 2) and summed over the keys. `node_labels`
    /// returns a node's labels; a node it does not know is left out, as upstream does on a failed Get.
    Spread {
        topology_keys: &'a [String],
        node_labels: &'a dyn Fn(&str) -> Option<&'a BTreeMap<String, String>>,
    },
}

/// The order used inside a same-node or topology group (`ActivePodsWithRanks` with no availability
/// function): ActivePods with the deletion cost between readiness and ready time.
fn ranked_cmp(pods: &[Pod], ranks: &Ranks, a: usize, b: usize) -> Ordering {
    let (pa, pb) = (&pods[a], &pods[b]);
    let rank = |i: usize| ranks.get(&i).copied().unwrap_or(0.0);
    pods::is_assigned(pa)
        .cmp(&pods::is_assigned(pb))
        .then_with(|| phase_ordinal(pa).cmp(&phase_ordinal(pb)))
        .then_with(|| pods::is_ready(pa).cmp(&pods::is_ready(pb)))
        .then_with(|| pods::deletion_cost(pa).cmp(&pods::deletion_cost(pb)))
        .then_with(|| rank(b).total_cmp(&rank(a)))
        .then_with(|| ready_time_order(pa, pb))
        .then_with(|| pods::max_container_restarts(pb).cmp(&pods::max_container_restarts(pa)))
        .then_with(|| unknown_then_newest_first(creation_time(pa), creation_time(pb)))
}

/// Same-node ranks of the candidates `indexes`.
pub fn same_node_ranks(pods: &[Pod], indexes: &[usize]) -> Ranks {
    let mut by_node: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for &i in indexes {
        if let Some(node) = pods::node_name(&pods[i]) {
            by_node.entry(node).or_default().push(i);
        }
    }
    let no_ranks = Ranks::new();
    let mut ranks = Ranks::new();
    for mut group in by_node.into_values().filter(|g| g.len() > 1) {
        group.sort_by(|&a, &b| ranked_cmp(pods, &no_ranks, a, b));
        // The best (last) Pod on the node keeps rank 0.
        let ranked = group.len() - 1;
        for (pos, &i) in group[..ranked].iter().enumerate() {
            ranks.insert(i, (ranked - pos) as f64);
        }
    }
    ranks
}

/// Topology-spread ranks of the candidates `indexes` (see [`Ranker::Spread`]).
pub fn spread_ranks<'a>(
    pods: &[Pod],
    indexes: &[usize],
    topology_keys: &[String],
    node_labels: &dyn Fn(&str) -> Option<&'a BTreeMap<String, String>>,
) -> Ranks {
    let same_node = same_node_ranks(pods, indexes);
    let no_ranks = Ranks::new();
    let mut ranks = Ranks::new();
    for key in topology_keys {
        let mut by_value: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &i in indexes {
            let value = pods::node_name(&pods[i])
                .and_then(node_labels)
                .and_then(|labels| labels.get(key));
            if let Some(value) = value {
                by_value.entry(value.as_str()).or_default().push(i);
            }
        }
        // Ranking by hostname already separates nodes; the same-node ranks would count twice.
        let inner = if key == LABEL_HOSTNAME {
            &no_ranks
        } else {
            &same_node
        };
        let weight = ((by_value.len() + 2) as f64).ln();
        for mut group in by_value.into_values() {
            group.sort_by(|&a, &b| ranked_cmp(pods, inner, a, b));
            let len = group.len();
            for (pos, &i) in group.iter().enumerate() {
                *ranks.entry(i).or_insert(0.0) += (len - pos) as f64 * weight;
            }
        }
    }
    ranks
}

/// CloneSet's scale-down order over the candidates `indexes`, most deletable first
/// (`ActivePodsWithRanks`): specified-delete Pods; unassigned; Pending < Unknown < Running; not
/// available (with `min_ready_seconds`) then not Ready; lower deletion cost; higher rank; Ready for less
/// time; more restarts; unknown creation time < newer < older.
///
/// Upstream deletes specified Pods in a separate step and skips scale-in while any exist; putting them
/// first here gives the same choice to a caller that only has this function.
pub fn scale_down_order(
    pods: &[Pod],
    indexes: &[usize],
    min_ready_seconds: i32,
    now: Timestamp,
    ranker: &Ranker<'_>,
) -> Vec<usize> {
    let ranks = match ranker {
        Ranker::None => Ranks::new(),
        Ranker::SameNode => same_node_ranks(pods, indexes),
        Ranker::Spread {
            topology_keys,
            node_labels,
        } => spread_ranks(pods, indexes, topology_keys, node_labels),
    };
    let available: HashMap<usize, bool> = indexes
        .iter()
        .map(|&i| (i, pods::is_available(&pods[i], min_ready_seconds, now)))
        .collect();
    let mut order = indexes.to_vec();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&pods[a], &pods[b]);
        pods::is_specified_delete(pb)
            .cmp(&pods::is_specified_delete(pa))
            .then_with(|| pods::is_assigned(pa).cmp(&pods::is_assigned(pb)))
            .then_with(|| phase_ordinal(pa).cmp(&phase_ordinal(pb)))
            .then_with(|| available.get(&a).cmp(&available.get(&b)))
            .then_with(|| ranked_cmp(pods, &ranks, a, b))
    });
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::testing::{ago, now, pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use kruise_api::pub_types::{UpdatePriorityOrderTerm, UpdatePriorityWeightTerm};
    use proptest::prelude::*;

    fn names(pods: &[Pod], order: &[usize]) -> Vec<String> {
        order
            .iter()
            .map(|&i| pods[i].metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn all(pods: &[Pod]) -> Vec<usize> {
        (0..pods.len()).collect()
    }

    #[test]
    fn trailing_integers() {
        let cases = [
            ("sts-10", 10),
            ("a1b22", 22),
            ("abc", 0),
            ("", 0),
            ("42", 42),
            ("x-007", 7),
            ("n99999999999999999999999", 0),
        ];
        for (value, want) in cases {
            assert_eq!(trailing_integer(value), want, "{value}");
        }
    }

    #[test]
    fn active_pods_order_table() {
        // Each pair: the first must sort strictly before the second.
        let pairs = [
            (
                "unassigned before assigned",
                pod("a").phase("Running").build(),
                pod("b").phase("Pending").node("n").build(),
            ),
            (
                "pending before running",
                pod("a").phase("Pending").node("n").build(),
                pod("b").phase("Running").node("n").build(),
            ),
            (
                "unknown before running",
                pod("a").phase("Unknown").node("n").build(),
                pod("b").phase("Running").node("n").build(),
            ),
            (
                "pending before unknown",
                pod("a").phase("Pending").node("n").build(),
                pod("b").phase("Unknown").node("n").build(),
            ),
            (
                "not ready before ready",
                pod("a").phase("Running").node("n").build(),
                pod("b").running_ready(10).build(),
            ),
            (
                "ready for less time first",
                pod("a").running_ready(5).build(),
                pod("b").running_ready(50).build(),
            ),
            (
                "more restarts first",
                pod("a").running_ready(5).restarts(4).build(),
                pod("b").running_ready(5).restarts(1).build(),
            ),
            (
                "no creation time first",
                pod("a").running_ready(5).build(),
                pod("b").running_ready(5).created(ago(100)).build(),
            ),
            (
                "newer before older",
                pod("a").running_ready(5).created(ago(10)).build(),
                pod("b").running_ready(5).created(ago(100)).build(),
            ),
        ];
        for (name, a, b) in pairs {
            assert_eq!(active_pods_cmp(&a, &b), Ordering::Less, "{name}");
            assert_eq!(active_pods_cmp(&b, &a), Ordering::Greater, "{name}");
        }
    }

    fn weight_term(weight: i32, key: &str, value: &str) -> UpdatePriorityWeightTerm {
        UpdatePriorityWeightTerm {
            weight,
            match_selector: LabelSelector {
                match_labels: Some([(key.to_string(), value.to_string())].into()),
                ..Default::default()
            },
        }
    }

    #[test]
    fn weight_priority() {
        let pods = vec![
            pod("none").build(),
            pod("low").label("tier", "low").build(),
            pod("high").label("tier", "high").build(),
            pod("both").label("tier", "high").label("zone", "a").build(),
            pod("none2").build(),
        ];
        let strategy = UpdatePriorityStrategy {
            weight_priority: vec![
                weight_term(50, "tier", "high"),
                weight_term(10, "tier", "low"),
                weight_term(20, "zone", "a"),
            ],
            ..Default::default()
        };
        let mut order = all(&pods);
        sort_by_priority(&pods, &mut order, &strategy);
        assert_eq!(
            names(&pods, &order),
            ["both", "high", "low", "none", "none2"]
        );
    }

    #[test]
    fn order_priority() {
        let pods = vec![
            pod("plain").build(),
            pod("key2").label("k2", "x-100").build(),
            pod("key1-3").label("k1", "sts-3").build(),
            pod("key1-10").label("k1", "sts-10").build(),
            pod("key1-text").label("k1", "abc").build(),
            pod("both")
                .label("k1", "sts-1")
                .label("k2", "x-999")
                .build(),
        ];
        let strategy = UpdatePriorityStrategy {
            order_priority: vec![
                UpdatePriorityOrderTerm {
                    ordered_key: "k1".into(),
                },
                UpdatePriorityOrderTerm {
                    ordered_key: "k2".into(),
                },
            ],
            ..Default::default()
        };
        let mut order = all(&pods);
        sort_by_priority(&pods, &mut order, &strategy);
        // Pods with none of the keys come first (level −1, as upstream); then k1 by trailing integer,
        // higher first; a Pod with k1 is never judged by k2.
        assert_eq!(
            names(&pods, &order),
            ["plain", "key1-10", "key1-3", "both", "key1-text", "key2"]
        );
    }

    #[test]
    fn empty_priority_keeps_order() {
        let pods = vec![pod("b").build(), pod("a").build()];
        let mut order = vec![1, 0];
        sort_by_priority(&pods, &mut order, &UpdatePriorityStrategy::default());
        assert_eq!(order, [1, 0]);
    }

    fn zone_pods(zones: &str) -> Vec<Pod> {
        zones
            .chars()
            .enumerate()
            .map(|(i, z)| {
                pod(&format!("{z}{i}"))
                    .label("zone", &z.to_string())
                    .build()
            })
            .collect()
    }

    fn term(k: &str, v: &str) -> UpdateScatterTerm {
        UpdateScatterTerm {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn scatter_table() {
        // (zones of all Pods in order, the term's value, expected zone sequence)
        let cases = [
            // Evenly interleaved; the last matched Pod goes last.
            ("aaaabbbb", "a", "abababba"),
            // Fewer matched Pods: spread among the unmatched.
            ("aaabbbbbb", "a", "abbbabbba"),
            // One side with at most one Pod: unchanged.
            ("abbbb", "a", "abbbb"),
            ("aaaab", "a", "aaaab"),
            // No matches: unchanged.
            ("bbbb", "a", "bbbb"),
        ];
        for (zones, value, want) in cases {
            let pods = zone_pods(zones);
            let order = scatter(&pods, all(&pods), &[term("zone", value)]);
            let got: String = order
                .iter()
                .map(|&i| {
                    pods[i]
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("zone"))
                        .map_or('?', |z| z.chars().next().unwrap_or('?'))
                })
                .collect();
            assert_eq!(got, want, "{zones} scatter {value}");
        }
    }

    #[test]
    fn scatter_group_sizes_by_density() {
        // Whole set a×2 b×6, waiting a a b b: the waiting Pods are denser in matches than the whole
        // set, so they are grouped among themselves: a, b b, then the last a.
        let pods = zone_pods("aabbbbbb");
        let order = scatter(&pods, vec![0, 1, 2, 3], &[term("zone", "a")]);
        assert_eq!(order, [0, 2, 3, 1]);
        // Whole set a×6 b×2, same waiting shape: the whole set's groups (3 matched per unmatched) do
        // not fit even once, so the unmatched Pods lead and the matched ones follow.
        let pods = zone_pods("aaaaaabb");
        let order = scatter(&pods, vec![0, 1, 6, 7], &[term("zone", "a")]);
        assert_eq!(order, [6, 7, 0, 1]);
    }

    #[test]
    fn scatter_terms_by_match_count() {
        let pods = vec![
            pod("p0").label("zone", "a").build(),
            pod("p1").label("zone", "a").build(),
            pod("p2").label("zone", "a").label("rack", "r").build(),
            pod("p3").build(),
        ];
        let terms = [term("rack", "r"), term("zone", "a"), term("zone", "z")];
        let got = scatter_terms(&pods, &all(&pods), &terms);
        assert_eq!(got, [&terms[1], &terms[0]]);
    }

    #[test]
    fn update_order_prefers_preparing_update_then_priority() {
        let pods = vec![
            pod("ready-old")
                .running_ready(100)
                .created(ago(200))
                .build(),
            pod("not-ready").phase("Running").node("n").build(),
            pod("preparing")
                .running_ready(100)
                .lifecycle("PreparingUpdate")
                .build(),
            pod("ready-new").running_ready(10).created(ago(20)).build(),
            pod("prio").running_ready(100).label("p", "1").build(),
        ];
        let order = sort_update_indexes(&pods, all(&pods), None, &[]);
        // "prio" has no creation time, which sorts before any known time among equals.
        assert_eq!(
            names(&pods, &order),
            ["preparing", "not-ready", "ready-new", "prio", "ready-old"]
        );
        let strategy = UpdatePriorityStrategy {
            weight_priority: vec![weight_term(10, "p", "1")],
            ..Default::default()
        };
        let order = sort_update_indexes(&pods, all(&pods), Some(&strategy), &[]);
        assert_eq!(
            names(&pods, &order),
            ["preparing", "prio", "not-ready", "ready-new", "ready-old"]
        );
    }

    #[test]
    fn scale_down_order_table() {
        let pods = vec![
            pod("old-ready")
                .running_ready(500)
                .created(ago(900))
                .build(),
            pod("specified")
                .running_ready(500)
                .label("apps.kruise.io/specified-delete", "true")
                .build(),
            pod("unassigned").phase("Pending").build(),
            pod("pending").phase("Pending").node("n").build(),
            pod("not-available")
                .running_ready(500)
                .lifecycle("PreparingUpdate")
                .build(),
            pod("cheap")
                .running_ready(500)
                .annotation(pods::ANNOTATION_POD_DELETION_COST, "-10")
                .build(),
            pod("young").running_ready(5).created(ago(900)).build(),
            pod("not-ready").phase("Running").node("n").build(),
        ];
        let order = scale_down_order(&pods, &all(&pods), 0, now(), &Ranker::None);
        assert_eq!(
            names(&pods, &order),
            [
                "specified",
                "unassigned",
                "pending",
                "not-ready",
                "not-available",
                "cheap",
                "young",
                "old-ready",
            ]
        );
    }

    #[test]
    fn deletion_order_table() {
        // (case, Pods in the caller's order, expected deletion order)
        let cases = [
            (
                // upstream's `recreate, update failed image and block`: the ready old Pod a budget
                // refuses comes first in the cache, the unready one on the failing image second
                "an unready Pod before a ready one",
                vec![
                    pod("old-ready").running_ready(300).build(),
                    pod("new-unready").phase("Running").node("n").build(),
                ],
                vec!["new-unready", "old-ready"],
            ),
            (
                "unassigned and pending before running",
                vec![
                    pod("running").running_ready(10).build(),
                    pod("pending").phase("Pending").node("n").build(),
                    pod("unassigned").phase("Pending").build(),
                ],
                vec!["unassigned", "pending", "running"],
            ),
            (
                "ready Pods: the least established first",
                vec![
                    pod("long").running_ready(500).build(),
                    pod("short").running_ready(5).build(),
                ],
                vec!["short", "long"],
            ),
            (
                "ties keep the caller's order",
                vec![
                    pod("b").running_ready(50).build(),
                    pod("a").running_ready(50).build(),
                ],
                vec!["b", "a"],
            ),
        ];
        for (case, pods, want) in cases {
            let mut order = all(&pods);
            sort_deletions(&pods, &mut order);
            assert_eq!(names(&pods, &order), want, "{case}");
        }
    }

    #[test]
    fn same_node_ranks_spread_deletions() {
        // Three Pods on node x, one on node y, all equally healthy: the crowded node loses Pods first.
        let pods = vec![
            pod("y1")
                .running_ready(100)
                .node("y")
                .created(ago(10))
                .build(),
            pod("x1")
                .running_ready(100)
                .node("x")
                .created(ago(30))
                .build(),
            pod("x2")
                .running_ready(100)
                .node("x")
                .created(ago(20))
                .build(),
            pod("x3")
                .running_ready(100)
                .node("x")
                .created(ago(40))
                .build(),
        ];
        let ranks = same_node_ranks(&pods, &all(&pods));
        // On x the ActivePods order is x2 (newest), x1, x3; x3 is kept unranked.
        assert_eq!(ranks.get(&2), Some(&2.0));
        assert_eq!(ranks.get(&1), Some(&1.0));
        assert_eq!(ranks.get(&3), None);
        assert_eq!(ranks.get(&0), None);
        let order = scale_down_order(&pods, &all(&pods), 0, now(), &Ranker::SameNode);
        assert_eq!(names(&pods, &order), ["x2", "x1", "y1", "x3"]);
    }

    #[test]
    fn spread_ranks_by_zone() {
        let zone_a: BTreeMap<String, String> = [("zone".to_string(), "a".to_string())].into();
        let zone_b: BTreeMap<String, String> = [("zone".to_string(), "b".to_string())].into();
        let lookup = |node: &str| match node {
            "n1" | "n2" => Some(&zone_a),
            "n3" => Some(&zone_b),
            _ => None,
        };
        let pods = vec![
            pod("a1")
                .running_ready(100)
                .node("n1")
                .created(ago(10))
                .build(),
            pod("a2")
                .running_ready(100)
                .node("n2")
                .created(ago(20))
                .build(),
            pod("a3")
                .running_ready(100)
                .node("n1")
                .created(ago(30))
                .build(),
            pod("b1")
                .running_ready(100)
                .node("n3")
                .created(ago(5))
                .build(),
            pod("lost")
                .running_ready(100)
                .node("gone")
                .created(ago(1))
                .build(),
        ];
        let keys = vec!["zone".to_string()];
        let order = scale_down_order(
            &pods,
            &all(&pods),
            0,
            now(),
            &Ranker::Spread {
                topology_keys: &keys,
                node_labels: &lookup,
            },
        );
        // Zone a holds three Pods, so its Pods carry the high ranks; the Pod on an unknown node has
        // rank 0 and goes last but is ordered by age among equals.
        assert_eq!(names(&pods, &order)[0], "a1");
        assert_eq!(
            names(&pods, &order).last().map(String::as_str),
            Some("lost")
        );
    }

    fn arb_pod() -> impl Strategy<Value = Pod> {
        (
            0usize..4,
            any::<bool>(),
            proptest::option::of(0i64..100),
            0i32..3,
            proptest::option::of(0i64..100),
            0usize..3,
            0usize..3,
            any::<bool>(),
            proptest::option::of(-2i32..2),
        )
            .prop_map(
                |(phase, assigned, ready, restarts, created, zone, state, deleted, cost)| {
                    let mut b = pod("p")
                        .phase(["Running", "Pending", "Unknown", "Failed"][phase])
                        .label("zone", ["a", "b", "c"][zone])
                        .lifecycle(["", "PreparingUpdate", "Updated"][state])
                        .restarts(restarts);
                    if assigned {
                        b = b.node(["n1", "n2", "n3"][zone]);
                    }
                    if let Some(r) = ready {
                        b = b.condition("Ready", "True", Some(ago(r)));
                    }
                    if let Some(c) = created {
                        b = b.created(ago(c));
                    }
                    if deleted {
                        b = b.label("apps.kruise.io/specified-delete", "true");
                    }
                    if let Some(c) = cost {
                        b = b.annotation(pods::ANNOTATION_POD_DELETION_COST, &c.to_string());
                    }
                    b.build()
                },
            )
    }

    fn is_permutation(order: &[usize], n: usize) -> bool {
        let mut sorted = order.to_vec();
        sorted.sort_unstable();
        sorted == (0..n).collect::<Vec<_>>()
    }

    proptest! {
        #[test]
        fn orders_are_permutations(
            pods in proptest::collection::vec(arb_pod(), 0..12),
            terms in proptest::collection::vec((0usize..3).prop_map(|z| term("zone", ["a", "b", "c"][z])), 0..3),
        ) {
            let n = pods.len();
            let strategy = UpdatePriorityStrategy {
                weight_priority: vec![weight_term(5, "zone", "b")],
                ..Default::default()
            };
            let order = sort_update_indexes(&pods, all(&pods), Some(&strategy), &terms);
            prop_assert!(is_permutation(&order, n));
            // PreparingUpdate Pods lead.
            let leading = order
                .iter()
                .take_while(|&&i| pods::lifecycle_state(&pods[i]) == LifecycleState::PreparingUpdate)
                .count();
            let total = pods.iter().filter(|p| pods::lifecycle_state(p) == LifecycleState::PreparingUpdate).count();
            prop_assert_eq!(leading, total);

            let order = scale_down_order(&pods, &all(&pods), 0, now(), &Ranker::SameNode);
            prop_assert!(is_permutation(&order, n));
            // Specified-delete Pods lead, then every unassigned Pod precedes every assigned one.
            let specified = pods.iter().filter(|p| pods::is_specified_delete(p)).count();
            prop_assert!(order[..specified].iter().all(|&i| pods::is_specified_delete(&pods[i])));
            let rest = &order[specified..];
            let unassigned = rest.iter().take_while(|&&i| !pods::is_assigned(&pods[i])).count();
            prop_assert!(rest[unassigned..].iter().all(|&i| pods::is_assigned(&pods[i])));
        }

        #[test]
        fn scatter_keeps_every_pod_and_ends_with_a_match(
            zones in proptest::collection::vec(0usize..3, 0..20),
            waiting_mask in proptest::collection::vec(any::<bool>(), 20),
        ) {
            let pods: Vec<Pod> = zones
                .iter()
                .map(|&z| pod("p").label("zone", ["a", "b", "c"][z]).build())
                .collect();
            let waiting: Vec<usize> = (0..pods.len()).filter(|&i| waiting_mask[i]).collect();
            let t = term("zone", "a");
            let order = scatter(&pods, waiting.clone(), std::slice::from_ref(&t));
            let mut a = order.clone();
            a.sort_unstable();
            prop_assert_eq!(a, waiting.clone());
            let matched = waiting.iter().filter(|&&i| matches_term(&pods[i], &t)).count();
            if matched > 1 && waiting.len() - matched > 1 {
                prop_assert!(order.last().is_some_and(|&i| matches_term(&pods[i], &t)));
            } else {
                prop_assert_eq!(order, waiting);
            }
        }

        #[test]
        fn priority_sort_is_stable_and_ordered(values in proptest::collection::vec(proptest::option::of(0u32..30), 0..15)) {
            let pods: Vec<Pod> = values
                .iter()
                .map(|v| match v {
                    Some(v) => pod("p").label("k", &format!("x-{v}")).build(),
                    None => pod("p").build(),
                })
                .collect();
            let strategy = UpdatePriorityStrategy {
                order_priority: vec![UpdatePriorityOrderTerm { ordered_key: "k".into() }],
                ..Default::default()
            };
            let mut order = all(&pods);
            sort_by_priority(&pods, &mut order, &strategy);
            for w in order.windows(2) {
                let (a, b) = (values[w[0]], values[w[1]]);
                match (a, b) {
                    (None, None) => prop_assert!(w[0] < w[1]),
                    (Some(_), None) => prop_assert!(false, "keyless Pods go first"),
                    (Some(x), Some(y)) => prop_assert!(x > y || (x == y && w[0] < w[1])),
                    (None, Some(_)) => {}
                }
            }
        }
    }
}
