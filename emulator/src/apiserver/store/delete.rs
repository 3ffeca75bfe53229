//! Delete with grace periods and finalizers, delete-collection, pod binding and garbage collection.

use super::*;

impl Store {
    /// DELETE of one object. Returns the object while its deletion is pending (finalizers,
    /// graceful pod termination), or a `Status` once it is gone — what the apiserver returns.
    pub fn delete(&mut self, target: &Target, opts: &DeleteOptions) -> ApiResult<Value> {
        self.take_fault(FaultVerb::Delete, target)?;
        let rt = self.rt(&target.key)?.clone();
        let name = target.name.clone().unwrap_or_default();
        let old = self.lookup(target)?.clone();
        if let Some(uid) = &opts.precondition_uid
            && Some(uid.as_str()) != meta_str(&old.object, "uid")
        {
            return Err(ApiError::conflict(
                &rt.qualified(),
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old.object, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_resource_version
            && Some(rv.as_str()) != meta_str(&old.object, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &rt.qualified(),
                &name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old.object, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        match opts.propagation_policy.as_deref() {
            None | Some("Background") => {}
            Some("Orphan") => self.orphan_dependents(&old.object),
            Some(other) => {
                return Err(ApiError::not_implemented(format!(
                    "propagationPolicy {other}"
                )));
            }
        }
        let okey = target.object_key();
        let grace = self.grace_period(&rt, &old.object, opts);
        let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
        if grace > 0 || !finalizers(&old.object).is_empty() || is_namespace {
            let mut new = old.object.clone();
            // `gracePeriodSeconds` is any int64 upstream (Go's time arithmetic wraps); a
            // deadline past the last representable time is that time, not a panic.
            let deadline = jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::from_secs(grace))
                .unwrap_or(jiff::Timestamp::MAX);
            let m = meta_mut(&mut new);
            let already = m.get("deletionTimestamp").is_some_and(|t| !t.is_null());
            let old_grace = m.get("deletionGracePeriodSeconds").and_then(Value::as_i64);
            // A second delete may only shorten the grace period.
            if !already || old_grace.is_some_and(|g| grace < g) {
                m.insert(
                    "deletionTimestamp".into(),
                    Value::String(deadline.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
                );
                m.insert("deletionGracePeriodSeconds".into(), Value::from(grace));
            }
            if is_namespace {
                new["status"] = json!({"phase": "Terminating"});
            }
            if !(grace == 0 && finalizers(&new).is_empty() && !is_namespace) {
                if new == old.object {
                    return Ok(Self::render(&rt, &target.version, &old.object));
                }
                let object = self.commit(
                    &target.key,
                    okey,
                    Stored {
                        object: new,
                        managed: old.managed,
                    },
                    EventKind::Modified,
                    Some(old.object),
                );
                return Ok(Self::render(&rt, &target.version, &object));
            }
        }
        let gone = self.remove(&target.key, &okey).unwrap_or(old.object);
        let (kind, group) = (rt.plural.clone(), rt.group.clone());
        Ok(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "group": group, "kind": kind, "uid": meta_str(&gone, "uid")},
        }))
    }

    /// Pods on a node terminate gracefully (the kubelet finishes the deletion with grace 0);
    /// unscheduled or finished pods and every other kind go at once (pod strategy CheckGracefulDelete).
    pub(super) fn grace_period(&self, rt: &ResourceType, obj: &Value, opts: &DeleteOptions) -> i64 {
        if !(rt.group.is_empty() && rt.plural == "pods") {
            return 0;
        }
        let scheduled = obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let finished = matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        if !scheduled || finished {
            return 0;
        }
        opts.grace_period_seconds
            .or_else(|| {
                obj.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0)
    }

    /// `propagationPolicy: Orphan`: dependents lose their reference to the owner instead of being collected.
    pub(super) fn orphan_dependents(&mut self, owner: &Value) {
        let Some(uid) = meta_str(owner, "uid").map(str::to_string) else {
            return;
        };
        let mut changes = Vec::new();
        for (key, objects) in &self.objects {
            for (okey, stored) in objects {
                let refs = stored
                    .object
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array);
                if refs.is_some_and(|r| {
                    r.iter()
                        .any(|o| o.get("uid").and_then(Value::as_str) == Some(&uid))
                }) {
                    changes.push((key.clone(), okey.clone(), stored.clone()));
                }
            }
        }
        for (key, okey, mut stored) in changes {
            let previous = stored.object.clone();
            if let Some(Value::Array(refs)) = stored.object.pointer_mut("/metadata/ownerReferences")
            {
                refs.retain(|o| o.get("uid").and_then(Value::as_str) != Some(&uid));
            }
            self.commit(&key, okey, stored, EventKind::Modified, Some(previous));
        }
    }

    pub fn delete_collection(
        &mut self,
        target: &Target,
        selectors: &Selectors,
        opts: &DeleteOptions,
    ) -> ApiResult<Value> {
        let rt = self.rt(&target.key)?.clone();
        let names: Vec<(String, String)> = self
            .objects_in(&target.key, target.namespace.as_deref())
            .iter()
            .filter(|o| selectors.matches(o))
            .map(|o| {
                (
                    meta_str(o, "namespace").unwrap_or_default().to_string(),
                    meta_str(o, "name").unwrap_or_default().to_string(),
                )
            })
            .collect();
        let mut items = Vec::new();
        for (ns, name) in names {
            let one = Target {
                name: Some(name),
                namespace: (!ns.is_empty()).then_some(ns),
                ..target.clone()
            };
            let before = self.get(&one)?;
            self.delete(&one, opts)?;
            items.push(before);
        }
        Ok(
            json!({"apiVersion": rt.api_version(&target.version), "kind": format!("{}List", rt.kind), "metadata": {"resourceVersion": self.revision.to_string()}, "items": items}),
        )
    }

    /// `POST pods/<name>/binding`: what the scheduler does to place a pod.
    pub fn bind_pod(&mut self, target: &Target, binding: &Value) -> ApiResult<Value> {
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    "Binding",
                    target.name.as_deref().unwrap_or_default(),
                    vec![FieldCause::required("target.name", "")],
                )
            })?
            .to_string();
        let pod_target = Target {
            subresource: None,
            ..target.clone()
        };
        let old = self.lookup(&pod_target)?.clone();
        let name = target.name.clone().unwrap_or_default();
        if let Some(current) = old
            .object
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                "pods",
                &name,
                &format!("pod {name} is already assigned to node \"{current}\""),
            ));
        }
        if is_deleting(&old.object) {
            return Err(ApiError::conflict(
                "pods",
                &name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        let mut new = old.object.clone();
        new["spec"]["nodeName"] = Value::String(node);
        let okey = pod_target.object_key();
        self.commit(
            &pod_target.key,
            okey,
            Stored {
                object: new,
                managed: old.managed,
            },
            EventKind::Modified,
            Some(old.object),
        );
        Ok(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        )
    }

    /// One pass of the garbage collector and the namespace controller: objects whose owners
    /// are all gone are deleted (background propagation), dangling owner references removed,
    /// and terminating namespaces emptied and then removed.
    pub fn collect_garbage(&mut self) {
        let work = std::mem::take(&mut self.gc.written);
        if !self.gc.everything {
            // Nothing removed: only the objects just written can point at a missing owner.
            let mut visits = 0;
            let orphaned = work.into_iter().any(|(key, okey)| {
                visits += 1;
                self.objects
                    .get(&key)
                    .and_then(|m| m.get(&okey))
                    .and_then(|s| s.object.pointer("/metadata/ownerReferences"))
                    .and_then(Value::as_array)
                    .is_some_and(|refs| {
                        refs.iter().any(|r| {
                            !r.get("uid")
                                .and_then(Value::as_str)
                                .is_some_and(|u| self.uids.contains(u))
                        })
                    })
            });
            self.gc.visits += visits;
            if !orphaned {
                return;
            }
        }
        self.gc.everything = false;
        self.gc.visits += self.objects.values().map(|m| m.len() as u64).sum::<u64>();
        let live = self.uids.clone();
        let ns_key = ResourceKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        let terminating: Vec<String> = self
            .objects
            .get(&ns_key)
            .into_iter()
            .flatten()
            .filter(|(_, s)| is_deleting(&s.object))
            .map(|((_, name), _)| name.clone())
            .collect();
        let mut deletions = Vec::new();
        let mut trims = Vec::new();
        for (key, objects) in &self.objects {
            for ((ns, name), stored) in objects {
                if is_deleting(&stored.object) {
                    continue;
                }
                if !ns.is_empty() && terminating.contains(ns) {
                    deletions.push((key.clone(), ns.clone(), name.clone()));
                    continue;
                }
                let refs: Vec<&Value> = stored
                    .object
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .collect();
                if refs.is_empty() {
                    continue;
                }
                let alive = refs
                    .iter()
                    .filter(|r| {
                        r.get("uid")
                            .and_then(Value::as_str)
                            .is_some_and(|u| live.contains(u))
                    })
                    .count();
                if alive == 0 {
                    deletions.push((key.clone(), ns.clone(), name.clone()));
                } else if alive < refs.len() {
                    trims.push((key.clone(), (ns.clone(), name.clone())));
                }
            }
        }
        for (key, ns, name) in deletions {
            let version = self
                .types
                .get(&key)
                .and_then(|t| t.versions.first().cloned())
                .unwrap_or_default();
            let target = Target {
                key,
                version,
                namespace: (!ns.is_empty()).then_some(ns),
                name: Some(name),
                subresource: None,
            };
            if let Err(e) = self.delete(&target, &DeleteOptions::default()) {
                tracing::warn!(error = %e, "garbage collector could not delete a dependent");
            }
        }
        for (key, okey) in trims {
            let Some(mut stored) = self.objects.get(&key).and_then(|m| m.get(&okey)).cloned()
            else {
                continue;
            };
            let previous = stored.object.clone();
            if let Some(Value::Array(refs)) = stored.object.pointer_mut("/metadata/ownerReferences")
            {
                refs.retain(|r| {
                    r.get("uid")
                        .and_then(Value::as_str)
                        .is_some_and(|u| live.contains(u))
                });
            }
            self.commit(&key, okey, stored, EventKind::Modified, Some(previous));
        }
        for ns in terminating {
            let empty = self
                .objects
                .iter()
                .all(|(key, m)| key == &ns_key || !m.keys().any(|(n, _)| n == &ns));
            if empty {
                self.remove(&ns_key, &(String::new(), ns));
            } else {
                // Still emptying: look again after the next write.
                self.gc.everything = true;
            }
        }
    }

    /// How many objects the garbage collector has looked at, over the store's life.
    pub fn garbage_collector_visits(&self) -> u64 {
        self.gc.visits
    }
}
