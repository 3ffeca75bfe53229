//! Create: identity and namespace checks, defaults, then the write itself.

use super::*;

impl Store {
    pub(super) fn check_body_identity(
        rt: &ResourceType,
        target: &Target,
        body: &Value,
    ) -> ApiResult<()> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body is not a JSON object",
            ));
        }
        if let Some(api_version) = body.get("apiVersion").and_then(Value::as_str)
            && api_version != rt.api_version(&target.version)
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                rt.api_version(&target.version)
            )));
        }
        if let Some(kind) = body.get("kind").and_then(Value::as_str)
            && kind != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                rt.kind
            )));
        }
        if rt.namespaced
            && let (Some(body_ns), Some(path_ns)) =
                (meta_str(body, "namespace"), target.namespace.as_deref())
            && body_ns != path_ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if let (Some(body_name), Some(path_name)) = (meta_str(body, "name"), target.name.as_deref())
            && body_name != path_name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({path_name})"
            )));
        }
        Ok(())
    }

    /// NamespaceLifecycle admission: content goes only into namespaces that exist and are
    /// not terminating.
    pub(super) fn check_namespace(&self, namespace: &str) -> ApiResult<()> {
        let key = ResourceKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        match self
            .objects
            .get(&key)
            .and_then(|m| m.get(&(String::new(), namespace.to_string())))
        {
            None => Err(ApiError::not_found("namespaces", namespace)),
            Some(ns) if is_deleting(&ns.object) => Err(ApiError::forbidden(format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ))),
            Some(_) => Ok(()),
        }
    }

    pub fn create(
        &mut self,
        target: &Target,
        mut body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        self.take_fault(FaultVerb::Create, target)?;
        let rt = self.rt(&target.key)?.clone();
        limits::check_depth(&rt.kind, &target.version, &body)?;
        Self::check_body_identity(&rt, target, &body)?;
        Self::check_type(&rt, &target.version, &body, false)?;
        self.check_fields(&rt, &target.version, &mut body, opts)?;
        conversion::to_storage(&target.key, &target.version, &mut body)?;
        if target.subresource.is_some() {
            return Err(ApiError::method_not_allowed());
        }
        if meta_str(&body, "resourceVersion").is_some() {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let namespace = if rt.namespaced {
            // A namespaced resource's all-namespaces path serves list and watch only.
            let ns = target
                .namespace
                .clone()
                .ok_or_else(ApiError::method_not_allowed)?;
            self.check_namespace(&ns)?;
            ns
        } else {
            String::new()
        };
        let name = match meta_str(&body, "name") {
            Some(name) => name.to_string(),
            None => match meta_str(&body, "generateName") {
                Some(prefix) => {
                    let mut name = format!("{prefix}{}", name_suffix());
                    // A collision is unlikely; try a few suffixes before answering AlreadyExists.
                    for _ in 0..8 {
                        if !self
                            .objects
                            .get(&self.storage_key(&target.key))
                            .is_some_and(|m| m.contains_key(&(namespace.clone(), name.clone())))
                        {
                            break;
                        }
                        name = format!("{prefix}{}", name_suffix());
                    }
                    name
                }
                None => {
                    let cause =
                        FieldCause::required("metadata.name", "name or generateName is required");
                    return Err(ApiError::invalid(&rt.kind_group(), "", vec![cause]));
                }
            },
        };
        validation::validate_name(&rt, &name)?;
        if self
            .objects
            .get(&self.storage_key(&target.key))
            .is_some_and(|m| m.contains_key(&(namespace.clone(), name.clone())))
        {
            return Err(ApiError::already_exists(&rt.qualified(), &name));
        }
        {
            let m = meta_mut(&mut body);
            m.insert("name".into(), Value::String(name.clone()));
            if rt.namespaced {
                m.insert("namespace".into(), Value::String(namespace.clone()));
            } else {
                m.remove("namespace");
            }
            m.insert(
                "uid".into(),
                Value::String(uuid::Uuid::new_v4().to_string()),
            );
            m.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
            m.insert("generation".into(), Value::from(1));
            for system in [
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
                "selfLink",
            ] {
                m.remove(system);
            }
        }
        if let Some(map) = body.as_object_mut() {
            map.insert(
                "apiVersion".into(),
                Value::String(rt.api_version(&target.version)),
            );
            map.insert("kind".into(), Value::String(rt.kind.clone()));
            if rt.status_subresource {
                // Every status-subresource strategy resets status on create (PrepareForCreate).
                map.remove("status");
            }
        }
        apply_create_defaults(&rt, &mut body);
        if rt.group == "resource.k8s.io" && rt.plural == "devicetaintrules" {
            device_taint_rule::stamp_time_added(None, &mut body, &now_rfc3339());
        }
        if rt.group.is_empty() && rt.plural == "pods" {
            validation::prune_pod_claims(&mut body, self.server_version);
        }
        if rt.custom
            && let Some(schema) = rt.schemas.get(&target.version)
        {
            schema::admit(schema, &mut body, &rt.kind_group(), &name)?;
        }
        self.drop_disabled_fields(&rt, None, &mut body);
        if rt.group.is_empty() && rt.plural == "services" {
            self.admit_new_service(&mut body, &name)?;
        }
        self.authorized_for_admin(&rt, &namespace, &body)?;
        validation::validate_write(&rt, None, &body, self.server_version, &self.feature_gates)?;
        if rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions" {
            self.register_crd(&mut body)?;
        }
        limits::check_size(&rt.kind, &name, &body)?;
        let mut managed = ManagedFields::default();
        managed.record_update(&opts.manager(), None, &body, &Shape::of(&rt));
        let stored = Stored {
            object: body,
            managed,
        };
        let object = self.commit(
            &target.key,
            (namespace, name),
            stored,
            EventKind::Added,
            None,
        );
        Ok(Self::render(&rt, &target.version, &object))
    }
}
