//! Shrinking: the smallest world (fewest pods, nodes, devices, requests, attributes) that
//! still disagrees, found greedily: every one-step reduction is tried in turn, the first
//! that keeps the disagreement is taken, and the search starts again from it, until no
//! step keeps it or the budget of tries is spent.

use crate::world::{Mode, RequestSpec, World};

/// Request `r` of claim `k` of pod `p`, or its subrequest `a` when it has some.
fn alternative_mut(w: &mut World, p: usize, k: usize, r: usize, a: usize) -> &mut RequestSpec {
    let request = &mut w.pods[p].claims[k].requests[r];
    if request.first_available.is_empty() {
        request
    } else {
        &mut request.first_available[a]
    }
}

/// Every world one step smaller than `w`, biggest cuts first.
pub fn reductions(w: &World) -> Vec<World> {
    let mut out = Vec::new();
    let mut push = |f: &dyn Fn(&mut World) -> bool| {
        let mut c = w.clone();
        if f(&mut c) {
            out.push(c);
        }
    };
    for i in (0..w.pods.len()).rev() {
        push(&|c| {
            c.pods.remove(i);
            true
        });
    }
    for i in (0..w.nodes.len()).rev() {
        push(&|c| {
            c.nodes.remove(i);
            true
        });
    }
    for (n, node) in w.nodes.iter().enumerate() {
        for d in (0..node.devices.len()).rev() {
            push(&|c| {
                c.nodes[n].devices.remove(d);
                true
            });
        }
    }
    for (p, pod) in w.pods.iter().enumerate() {
        for k in (0..pod.claims.len()).rev() {
            push(&|c| {
                if c.pods[p].claims.len() < 2 {
                    return false;
                }
                c.pods[p].claims.remove(k);
                true
            });
        }
        for (k, claim) in pod.claims.iter().enumerate() {
            for m in (0..claim.match_attributes.len()).rev() {
                push(&|c| {
                    c.pods[p].claims[k].match_attributes.remove(m);
                    true
                });
            }
            for r in (0..claim.requests.len()).rev() {
                push(&|c| {
                    let claim = &mut c.pods[p].claims[k];
                    if claim.requests.len() < 2 {
                        return false;
                    }
                    let name = claim.requests.remove(r).name;
                    for (_, bound) in &mut claim.match_attributes {
                        bound.retain(|b| *b != name);
                    }
                    true
                });
                // A `firstAvailable` request becomes one of its subrequests, named as it.
                for a in 0..claim.requests[r].first_available.len() {
                    push(&|c| {
                        let request = &mut c.pods[p].claims[k].requests[r];
                        let name = request.name.clone();
                        *request = RequestSpec {
                            name,
                            ..request.first_available[a].clone()
                        };
                        true
                    });
                }
                for a in 0..claim.requests[r].alternatives().len() {
                    push(&|c| alternative_mut(c, p, k, r, a).selector.take().is_some());
                    push(&|c| {
                        !std::mem::take(&mut alternative_mut(c, p, k, r, a).tolerations).is_empty()
                    });
                    push(&|c| alternative_mut(c, p, k, r, a).capacity.take().is_some());
                    push(&|c| {
                        let request = alternative_mut(c, p, k, r, a);
                        match request.mode {
                            Mode::All => request.mode = Mode::Count(1),
                            Mode::Count(n) if n > 1 => request.mode = Mode::Count(n - 1),
                            Mode::Count(_) => return false,
                        }
                        true
                    });
                    push(&|c| {
                        let request = alternative_mut(c, p, k, r, a);
                        if request.class == "any" {
                            return false;
                        }
                        request.class = "any".into();
                        true
                    });
                }
            }
        }
    }
    for (i, class) in w.classes.iter().enumerate() {
        let used = w
            .pods
            .iter()
            .flat_map(|p| &p.claims)
            .flat_map(|c| &c.requests)
            .flat_map(RequestSpec::alternatives)
            .any(|r| r.class == class.name);
        if !used {
            push(&|c| {
                c.classes.remove(i);
                true
            });
        } else if class.selector.is_some() {
            push(&|c| c.classes[i].selector.take().is_some());
        }
    }
    for (n, node) in w.nodes.iter().enumerate() {
        for (d, device) in node.devices.iter().enumerate() {
            for attr in device.attributes.keys() {
                push(&|c| c.nodes[n].devices[d].attributes.remove(attr).is_some());
            }
            for cap in device.capacity.keys() {
                push(&|c| c.nodes[n].devices[d].capacity.remove(cap).is_some());
            }
            if !device.taints.is_empty() {
                push(&|c| {
                    c.nodes[n].devices[d].taints.clear();
                    true
                });
            }
            if device.shared.is_some() {
                push(&|c| c.nodes[n].devices[d].shared.take().is_some());
            }
            if device.consumes.is_some() {
                push(&|c| c.nodes[n].devices[d].consumes.take().is_some());
            }
        }
        // The counter set goes with every consumption of it (a device may not consume a
        // set its pool does not have).
        if node.counter.is_some() {
            push(&|c| {
                let node = &mut c.nodes[n];
                node.counter = None;
                for device in &mut node.devices {
                    device.consumes = None;
                }
                true
            });
        }
    }
    out
}

/// The smallest world found that `still_disagrees`, trying at most `budget` worlds.
pub async fn shrink<F>(world: World, budget: usize, mut still_disagrees: F) -> (World, usize)
where
    F: AsyncFnMut(&World) -> bool,
{
    let mut best = world;
    let mut tries = 0;
    'outer: loop {
        for candidate in reductions(&best) {
            if tries >= budget {
                break 'outer;
            }
            tries += 1;
            if still_disagrees(&candidate).await {
                best = candidate;
                continue 'outer;
            }
        }
        break;
    }
    (best, tries)
}

/// A size measure for the report: pods, nodes, devices, requests, attributes.
pub fn size(w: &World) -> (usize, usize, usize, usize, usize) {
    let devices = w.nodes.iter().map(|n| n.devices.len()).sum();
    let requests = w
        .pods
        .iter()
        .flat_map(|p| &p.claims)
        .map(|c| c.requests.len())
        .sum();
    let attributes = w
        .nodes
        .iter()
        .flat_map(|n| &n.devices)
        .map(|d| d.attributes.len())
        .sum();
    (w.pods.len(), w.nodes.len(), devices, requests, attributes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate;

    #[tokio::test]
    async fn shrinking_keeps_what_the_predicate_needs_and_drops_the_rest() {
        let world = (0..100)
            .map(generate::world)
            .find(|w| w.pods.len() >= 3 && w.nodes.iter().any(|n| n.devices.len() >= 3))
            .unwrap_or_default();
        // "Disagrees" while some node has 2 devices or more.
        let (small, tries) = shrink(world, 1000, async |w: &World| {
            w.nodes.iter().any(|n| n.devices.len() >= 2)
        })
        .await;
        assert!(tries > 0);
        assert!(small.pods.is_empty(), "{small:?}");
        assert_eq!(small.nodes.len(), 1);
        assert_eq!(small.nodes[0].devices.len(), 2);
        assert!(
            small.nodes[0]
                .devices
                .iter()
                .all(|d| d.attributes.is_empty())
        );
    }
}
