//! CustomResourceDefinitions: a created or updated CRD registers its resource type, a deleted one removes it.

use super::*;

impl Store {
    pub(super) fn register_crd(&mut self, crd: &mut Value) -> ApiResult<()> {
        let new_type = registry::from_crd(crd)?;
        for (version, schema) in &new_type.schemas {
            schema::check_supported(
                schema,
                &format!("spec.versions[{version}].schema.openAPIV3Schema"),
            )?;
        }
        let name = meta_str(crd, "name").unwrap_or_default();
        let expected = format!("{}.{}", new_type.plural, new_type.group);
        if name != expected {
            let cause = FieldCause::invalid(
                "metadata.name",
                &Value::String(name.into()),
                format!("must be spec.names.plural+\".\"+spec.group ({expected})"),
            );
            return Err(ApiError::invalid(
                "CustomResourceDefinition.apiextensions.k8s.io",
                name,
                vec![cause],
            ));
        }
        if self.types.contains_key(&new_type.key()) {
            return Err(ApiError::already_exists(
                "customresourcedefinitions.apiextensions.k8s.io",
                name,
            ));
        }
        if let Some(map) = crd.as_object_mut() {
            map.insert("status".into(), json!({
                "acceptedNames": crd_names(&new_type),
                "storedVersions": [new_type.versions.first()],
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "lastTransitionTime": now_rfc3339()},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "lastTransitionTime": now_rfc3339()},
                ],
            }));
        }
        self.register(new_type);
        Ok(())
    }

    /// An updated CRD serves what it says from now on: its versions, names and schemas (the
    /// objects stay as stored; new writes are checked against the new schema), as the
    /// apiextensions-apiserver rebuilds its handler for the CRD on every change. Group,
    /// plural and scope cannot change.
    pub(super) fn reregister_crd(&mut self, old: &Value, crd: &mut Value) -> ApiResult<()> {
        let name = meta_str(crd, "name").unwrap_or_default().to_string();
        let new_type = registry::from_crd(crd)?;
        for (version, schema) in &new_type.schemas {
            schema::check_supported(
                schema,
                &format!("spec.versions[{version}].schema.openAPIV3Schema"),
            )?;
        }
        let old_type = registry::from_crd(old)?;
        let immutable = |field: &str, value: &Value| {
            ApiError::invalid(
                "CustomResourceDefinition.apiextensions.k8s.io",
                &name,
                vec![FieldCause::invalid(field, value, "field is immutable")],
            )
        };
        if new_type.group != old_type.group {
            return Err(immutable("spec.group", &Value::String(new_type.group)));
        }
        if new_type.plural != old_type.plural {
            return Err(immutable(
                "spec.names.plural",
                &Value::String(new_type.plural),
            ));
        }
        if new_type.namespaced != old_type.namespaced {
            return Err(immutable(
                "spec.scope",
                crd.pointer("/spec/scope").unwrap_or(&Value::Null),
            ));
        }
        let mut stored_versions: Vec<Value> = crd
            .pointer("/status/storedVersions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(storage) = new_type.versions.first()
            && !stored_versions.iter().any(|v| v.as_str() == Some(storage))
        {
            stored_versions.push(Value::String(storage.clone()));
        }
        if let Some(status) = crd.get_mut("status").and_then(Value::as_object_mut) {
            status.insert("acceptedNames".into(), crd_names(&new_type));
            status.insert("storedVersions".into(), Value::Array(stored_versions));
        }
        self.register(new_type);
        Ok(())
    }

    /// Deleting a CRD deletes its custom objects with it (the apiextensions finalizer's job).
    pub(super) fn unregister_crd(&mut self, crd: &Value) {
        let Ok(rt) = registry::from_crd(crd) else {
            return;
        };
        let key = rt.key();
        let names: Vec<ObjectKey> = self
            .objects
            .get(&key)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for okey in names {
            self.remove(&key, &okey);
        }
        self.types.remove(&key);
        self.objects.remove(&key);
    }
}
