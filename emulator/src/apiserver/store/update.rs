//! Update, patch and server-side apply.

use super::*;

impl Store {
    pub fn update(
        &mut self,
        target: &Target,
        mut body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        self.take_fault(FaultVerb::Update, target)?;
        let rt = self.rt(&target.key)?.clone();
        limits::check_depth(&rt.kind, &target.version, &body)?;
        Self::check_body_identity(&rt, target, &body)?;
        Self::check_type(&rt, &target.version, &body, false)?;
        self.check_fields(&rt, &target.version, &mut body, opts)?;
        conversion::to_storage(&target.key, &target.version, &mut body)?;
        let old = self.lookup(target)?.clone();
        if let Some(rv) = meta_str(&body, "resourceVersion")
            && Some(rv) != meta_str(&old.object, "resourceVersion")
        {
            return Err(ApiError::stale_resource_version(
                &rt.qualified(),
                target.name.as_deref().unwrap_or_default(),
            ));
        }
        let new = Self::merge_into_old(&rt, target, &old.object, body)?;
        let mut managed = old.managed.clone();
        managed.record_update(&opts.manager(), Some(&old.object), &new, &Shape::of(&rt));
        self.finish_update(&rt, target, old, new, managed)
    }

    /// Builds the stored object of an update: the main endpoint keeps the old status (when
    /// status is a subresource), `/status` keeps everything but status, and system metadata
    /// always comes from the stored object.
    pub(super) fn merge_into_old(
        rt: &ResourceType,
        target: &Target,
        old: &Value,
        body: Value,
    ) -> ApiResult<Value> {
        let mut new = match target.subresource.as_deref() {
            Some("status") if rt.status_subresource => {
                let mut new = old.clone();
                if let Some(map) = new.as_object_mut() {
                    match body.get("status") {
                        Some(status) => map.insert("status".into(), status.clone()),
                        None => map.remove("status"),
                    };
                }
                new
            }
            None => {
                let mut new = body;
                if rt.status_subresource
                    && let Some(map) = new.as_object_mut()
                {
                    match old.get("status") {
                        Some(status) => map.insert("status".into(), status.clone()),
                        None => map.remove("status"),
                    };
                }
                new
            }
            Some(other) => return Err(ApiError::no_route(&format!("{}/{other}", rt.plural))),
        };
        let old_meta = meta(old).cloned().unwrap_or_default();
        let m = meta_mut(&mut new);
        for system in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ] {
            match old_meta.get(system) {
                Some(v) => m.insert(system.into(), v.clone()),
                None => m.remove(system),
            };
        }
        m.remove("managedFields");
        if let Some(map) = new.as_object_mut() {
            map.insert(
                "apiVersion".into(),
                Value::String(rt.api_version(&target.version)),
            );
            map.insert("kind".into(), Value::String(rt.kind.clone()));
        }
        Ok(new)
    }

    pub(super) fn finish_update(
        &mut self,
        rt: &ResourceType,
        target: &Target,
        old: Stored,
        mut new: Value,
        managed: ManagedFields,
    ) -> ApiResult<Value> {
        let name = target.name.clone().unwrap_or_default();
        if rt.custom
            && let Some(schema) = rt.schemas.get(&target.version)
        {
            schema::admit(schema, &mut new, &rt.kind_group(), &name)?;
        }
        if is_deleting(&old.object) {
            let before = finalizers(&old.object);
            if finalizers(&new).iter().any(|f| !before.contains(f)) {
                let cause = FieldCause::forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted",
                );
                return Err(ApiError::invalid(&rt.kind_group(), &name, vec![cause]));
            }
        }
        if spec_part(&new) != spec_part(&old.object) {
            let generation = meta(&old.object)
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), Value::from(generation + 1));
        }
        if rt.group.is_empty() && rt.plural == "pods" {
            validation::prune_pod_claims(&mut new, self.server_version);
        }
        self.drop_disabled_fields(rt, Some(&old.object), &mut new);
        if rt.group == "resource.k8s.io" && rt.plural == "devicetaintrules" {
            device_taint_rule::stamp_time_added(Some(&old.object), &mut new, &now_rfc3339());
        }
        if rt.group.is_empty() && rt.plural == "services" && target.subresource.is_none() {
            Self::admit_service_update(&old.object, &mut new, &name)?;
        }
        validation::validate_write(
            rt,
            Some(&old.object),
            &new,
            self.server_version,
            &self.feature_gates,
        )?;
        // An update that changes nothing is not written and bumps nothing (GuaranteedUpdate
        // short-circuits on identical bytes), so controllers do not feed their own loops.
        if new == old.object {
            return Ok(Self::render(rt, &target.version, &old.object));
        }
        if rt.group == "apiextensions.k8s.io"
            && rt.plural == "customresourcedefinitions"
            && target.subresource.is_none()
        {
            self.reregister_crd(&old.object, &mut new)?;
            if new == old.object {
                return Ok(Self::render(rt, &target.version, &old.object));
            }
        }
        limits::check_size(&rt.kind, &name, &new)?;
        let okey = target.object_key();
        let grace = meta(&new)
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if is_deleting(&new) && finalizers(&new).is_empty() && grace == 0 {
            let gone = self.remove(&target.key, &okey).unwrap_or(new);
            return Ok(Self::render(rt, &target.version, &gone));
        }
        let previous = Some(old.object);
        let object = self.commit(
            &target.key,
            okey,
            Stored {
                object: new,
                managed,
            },
            EventKind::Modified,
            previous,
        );
        Ok(Self::render(rt, &target.version, &object))
    }

    pub fn patch(
        &mut self,
        target: &Target,
        patch_type: PatchType,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        self.take_fault(FaultVerb::Patch, target)?;
        let rt = self.rt(&target.key)?.clone();
        if patch_type == PatchType::Apply {
            return self.apply(&rt, target, body, opts);
        }
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        let patch = Self::merge_patch_object(patch_type, patch, opts)?;
        let old = self.lookup(target)?.clone();
        let mut patched = Self::render(&rt, &target.version, &old.object);
        match patch_type {
            PatchType::Merge => json_patch::merge(&mut patched, &patch),
            PatchType::Strategic => {
                if rt.custom {
                    // apiextensions-apiserver: custom resources do not support strategic merge.
                    return Err(ApiError::unsupported_media_type(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    ));
                }
                if uses_strategic_features(&patch) {
                    return Err(ApiError::not_implemented(
                        "strategic merge patch with lists or $-directives (use a merge or JSON patch)",
                    ));
                }
                // Without lists or directives a strategic merge patch means what a merge patch means.
                json_patch::merge(&mut patched, &patch);
            }
            PatchType::Json => {
                let ops: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
                    ApiError::bad_request(format!("error decoding JSON patch: {e}"))
                })?;
                // A failed `test` is the JSON-patch way of a precondition: the apiserver
                // says 422; too many operations 413 (see `limits`).
                limits::apply_json_patch(&mut patched, &ops).map_err(|e| {
                    e.into_api_error(&rt.kind_group(), target.name.as_deref().unwrap_or_default())
                })?;
            }
            PatchType::Apply => unreachable_patch(),
        }
        limits::check_depth(&rt.kind, &target.version, &patched)?;
        if meta_str(&patched, "resourceVersion") != meta_str(&old.object, "resourceVersion") {
            return Err(ApiError::stale_resource_version(
                &rt.qualified(),
                target.name.as_deref().unwrap_or_default(),
            ));
        }
        Self::check_body_identity(&rt, target, &patched)?;
        Self::check_type(&rt, &target.version, &patched, true)?;
        self.check_fields(&rt, &target.version, &mut patched, opts)?;
        conversion::to_storage(&target.key, &target.version, &mut patched)?;
        let new = Self::merge_into_old(&rt, target, &old.object, patched)?;
        let mut managed = old.managed.clone();
        managed.record_update(&opts.manager(), Some(&old.object), &new, &Shape::of(&rt));
        self.finish_update(&rt, target, old, new, managed)
    }

    /// A merge or strategic-merge patch must be a JSON object. `[1,2]` replaced the whole
    /// object and came back as a 409 about a modified object. kube-apiserver (endpoints/
    /// handlers/patch.go) decodes the patch into a `map[string]interface{}` first: with
    /// fieldValidation Warn (the default) or Strict a merge patch gets 400 `error decoding
    /// patch: json: cannot unmarshal array into Go value of type map[string]interface {}`,
    /// a strategic one the same without the prefix; with Ignore evanphx/json-patch's
    /// MergePatch returns the array and decoding it into the kind fails: 422 on `patch`. A
    /// `null` merge patch is `ErrBadJSONPatch` (400 `Invalid JSON Patch`), a `null`
    /// strategic one an empty map.
    fn merge_patch_object(
        patch_type: PatchType,
        patch: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        if !matches!(patch_type, PatchType::Merge | PatchType::Strategic) || patch.is_object() {
            return Ok(patch);
        }
        let go_type = match &patch {
            Value::Null if patch_type == PatchType::Strategic => return Ok(json!({})),
            Value::Null => return Err(ApiError::bad_request("Invalid JSON Patch")),
            Value::Array(_) => "array",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Bool(_) => "bool",
            Value::Object(_) => return Ok(patch),
        };
        let why = format!(
            "json: cannot unmarshal {go_type} into Go value of type map[string]interface {{}}"
        );
        match (patch_type, opts.field_validation) {
            (PatchType::Strategic, _) => Err(ApiError::bad_request(why)),
            (_, FieldValidation::Ignore) => Err(ApiError::invalid(
                "",
                "",
                vec![FieldCause::invalid(
                    "patch",
                    &Value::String(patch.to_string()),
                    format!(
                        "json: cannot unmarshal {go_type} into Go value of type map[string]interface {{}}"
                    ),
                )],
            )),
            _ => Err(ApiError::bad_request(format!(
                "error decoding patch: {why}"
            ))),
        }
    }

    /// Server-side apply (`application/apply-patch+yaml`).
    pub(super) fn apply(
        &mut self,
        rt: &ResourceType,
        target: &Target,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        let name = target.name.clone().unwrap_or_default();
        let Some(manager) = opts.field_manager.clone().filter(|m| !m.is_empty()) else {
            let cause = FieldCause::required("fieldManager", "is required for apply patch");
            return Err(ApiError::invalid(
                "PatchOptions.meta.k8s.io",
                "",
                vec![cause],
            ));
        };
        // Checked first: libyaml's time grows with the square of the nesting depth.
        fake_dra_ops::yaml::check_depth(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        let mut config: Value = serde_yaml_ng::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if config.get("apiVersion").and_then(Value::as_str).is_none()
            || config.get("kind").and_then(Value::as_str).is_none()
        {
            return Err(ApiError::bad_request(
                "apply patches must name apiVersion and kind",
            ));
        }
        Self::check_body_identity(rt, target, &config)?;
        // Typing the applied object refuses a `map` or `set` list with a repeated item:
        // an error that is no API status, so kube-apiserver answers 500 with no reason
        // (k8s.io/apimachinery managedfields/internal/structuredmerge.go `Apply`: "failed
        // to create typed patch object (%v): %v", the object as `namespace/name; gvk`).
        let duplicates = managed::duplicate_entries(&config, &Shape::of(rt));
        if !duplicates.is_empty() {
            let errors = match duplicates.as_slice() {
                [one] => one.clone(),
                many => format!("errors:\n  {}", many.join("\n  ")),
            };
            return Err(ApiError::unknown(format!(
                "failed to create typed patch object ({}/{name}; {}/{}, Kind={}): {errors}",
                target.namespace.as_deref().unwrap_or_default(),
                rt.group,
                target.version,
                rt.kind
            )));
        }
        self.check_fields(rt, &target.version, &mut config, opts)?;
        let Ok(old) = self.lookup(target).cloned() else {
            // Apply creates what does not exist, but not through a subresource: the status
            // REST storage passes forceAllowCreate=false ("subresources should never allow
            // create on update", k8s.io/apiserver registry/generic/registry/store.go Update),
            // so kube-apiserver answers NotFound.
            if target.subresource.is_some() {
                return Err(ApiError::not_found(&rt.qualified(), &name));
            }
            let mut create_target = target.clone();
            create_target.name = None;
            let mut body = config.clone();
            meta_mut(&mut body).insert("name".into(), Value::String(name.clone()));
            let created = self.create(&create_target, body, opts)?;
            conversion::to_storage(&target.key, &target.version, &mut config)?;
            let key = self.storage_key(&target.key);
            if let Some(stored) = self
                .objects
                .get_mut(&key)
                .and_then(|m| m.get_mut(&target.object_key()))
            {
                stored.managed = ManagedFields::default();
                stored.managed.apply(
                    &manager,
                    &Value::Object(Map::new()),
                    &config,
                    &Shape::of(rt),
                );
            }
            return Ok(created);
        };
        // Managed fields are tracked on the stored layout, whatever version applied.
        conversion::to_storage(&target.key, &target.version, &mut config)?;
        if let Some(rv) = meta_str(&config, "resourceVersion")
            && Some(rv) != meta_str(&old.object, "resourceVersion")
        {
            return Err(ApiError::stale_resource_version(&rt.qualified(), &name));
        }
        let mut managed = old.managed.clone();
        let conflicts = managed.conflicts(&manager, &old.object, &config, &Shape::of(rt));
        if !conflicts.is_empty() && !opts.force {
            let list: Vec<String> = conflicts
                .iter()
                .map(|c| {
                    format!(
                        "conflict with \"{}\": {}",
                        c.manager,
                        managed::render(&c.path)
                    )
                })
                .collect();
            let mut err = ApiError::conflict(&rt.qualified(), &name, "");
            err.message = format!(
                "Apply failed with {} conflict{}: {}",
                list.len(),
                if list.len() == 1 { "" } else { "s" },
                list.join("\n")
            );
            return Err(err);
        }
        let merged = managed.apply(&manager, &old.object, &config, &Shape::of(rt));
        limits::check_depth(&rt.kind, &target.version, &merged)?;
        // The applied configuration may leave out what its type requires; the merged
        // object may not.
        Self::check_type(
            rt,
            &target.version,
            &Self::render(rt, &target.version, &merged),
            true,
        )?;
        let new = Self::merge_into_old(rt, target, &old.object, merged)?;
        self.finish_update(rt, target, old, new, managed)
    }
}
