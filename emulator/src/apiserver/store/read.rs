//! Reads: get, list, watch and the events a watch renders.

use super::*;

impl Store {
    pub fn get(&self, target: &Target) -> ApiResult<Value> {
        let rt = self.rt(&target.key)?;
        let stored = self.lookup(target)?;
        Ok(Self::render(rt, &target.version, &stored.object))
    }

    /// Every object of the resource in the target's namespace scope, sorted by namespace and name.
    pub fn objects_in(&self, key: &ResourceKey, namespace: Option<&str>) -> Vec<Value> {
        self.objects
            .get(&self.storage_key(key))
            .into_iter()
            .flatten()
            .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
            .map(|(_, s)| s.object.clone())
            .collect()
    }

    pub fn list(
        &mut self,
        target: &Target,
        selectors: &Selectors,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> ApiResult<Value> {
        self.take_fault(FaultVerb::List, target)?;
        let rt = self.rt(&target.key)?.clone();
        let (revision, mut items) = match continue_token.filter(|t| !t.is_empty()) {
            Some(token) => {
                let i = self.snapshots.iter().position(|s| s.token == token).ok_or_else(|| {
                    ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
                })?;
                let snapshot = self
                    .snapshots
                    .remove(i)
                    .ok_or_else(|| ApiError::internal("snapshot vanished"))?;
                (snapshot.revision, snapshot.rest)
            }
            None => {
                let items: Vec<Value> = self
                    .objects_in(&target.key, target.namespace.as_deref())
                    .into_iter()
                    .filter(|o| selectors.matches(o))
                    .map(|o| Self::render(&rt, &target.version, &o))
                    .collect();
                (self.revision, items)
            }
        };
        let mut list_meta = json!({"resourceVersion": revision.to_string()});
        if let Some(limit) = limit.filter(|l| *l > 0 && items.len() > *l) {
            let rest = items.split_off(limit);
            let token = format!("{revision}-{}", uuid::Uuid::new_v4().simple());
            list_meta["continue"] = Value::String(token.clone());
            list_meta["remainingItemCount"] = Value::from(rest.len());
            self.snapshots.push_back(ListSnapshot {
                token,
                revision,
                rest,
            });
            while self.snapshots.len() > SNAPSHOTS_KEPT {
                self.snapshots.pop_front();
            }
        }
        Ok(json!({
            "apiVersion": rt.api_version(&target.version),
            "kind": format!("{}List", rt.kind),
            "metadata": list_meta,
            "items": items,
        }))
    }

    /// Starts a watch. `resource_version` follows the apiserver: unset or "0" sends the
    /// current objects as ADDED first; a number replays what happened after it, or fails
    /// with 410 when that is no longer in the history.
    pub fn watch(
        &self,
        target: &Target,
        selectors: &Selectors,
        resource_version: Option<&str>,
    ) -> ApiResult<WatchStart> {
        let rt = self.rt(&target.key)?;
        let live = self.events.subscribe();
        let initial = match resource_version.filter(|rv| !rv.is_empty() && *rv != "0") {
            None => self
                .objects_in(&target.key, target.namespace.as_deref())
                .into_iter()
                .filter(|o| selectors.matches(o))
                .map(|o| (EventKind::Added, Self::render(rt, &target.version, &o)))
                .collect(),
            Some(rv) => {
                let from: u64 = rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version {rv:?}"))
                })?;
                if from < self.oldest_watchable {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {from} ({})",
                        self.oldest_watchable
                    )));
                }
                if from > self.revision {
                    return Err(ApiError::resource_version_too_large(from, self.revision));
                }
                let storage = self.storage_key(&target.key);
                self.history
                    .iter()
                    .filter(|e| e.revision > from)
                    .filter_map(|e| {
                        filter_event(e, &storage, target, selectors)
                            .map(|(k, o)| (k, Self::render(rt, &target.version, &o)))
                    })
                    .collect()
            }
        };
        Ok(WatchStart {
            initial,
            live,
            revision: self.revision,
        })
    }

    pub fn render_event(
        &self,
        event: &WatchEvent,
        target: &Target,
        selectors: &Selectors,
    ) -> Option<(EventKind, Value)> {
        let rt = self.types.get(&target.key)?;
        filter_event(event, &self.storage_key(&target.key), target, selectors)
            .map(|(k, o)| (k, Self::render(rt, &target.version, &o)))
    }
}
