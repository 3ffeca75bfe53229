//! Classic DRA (Kubernetes 1.27–1.30): the `v1alpha2.Node` and `v1alpha3.Node` services
//! on [`NodeService`]. Only the classic mode serves them; the structured path does not
//! need this file.

use super::*;

#[tonic::async_trait]
impl<D: DeviceProfile> v1alpha2::node_server::Node for NodeService<D> {
    async fn node_prepare_resource(
        &self,
        request: Request<v1alpha2::NodePrepareResourceRequest>,
    ) -> Result<Response<v1alpha2::NodePrepareResourceResponse>, Status> {
        let start = Instant::now();
        let r = request.into_inner();
        let read = self.read_handle(
            &r.claim_uid,
            &r.namespace,
            &r.claim_name,
            &r.resource_handle,
        );
        let result = self.prepare(vec![read]).await?.pop();
        self.metrics
            .observe("NodePrepareResource", start.elapsed().as_secs_f64());
        match result {
            Some(Ok((claim, prepared))) => {
                Ok(Response::new(v1alpha2::NodePrepareResourceResponse {
                    cdi_devices: self.claim_ids(&claim, &prepared),
                }))
            }
            Some(Err(e)) => Err(Status::failed_precondition(e.to_string())),
            None => Err(Status::internal("no result")),
        }
    }

    async fn node_unprepare_resource(
        &self,
        request: Request<v1alpha2::NodeUnprepareResourceRequest>,
    ) -> Result<Response<v1alpha2::NodeUnprepareResourceResponse>, Status> {
        let start = Instant::now();
        let r = request.into_inner();
        let claim =
            ClaimRef::new(&r.claim_uid, &r.namespace, &r.claim_name).map_err(ClaimError::from);
        let result = self.unprepare(vec![claim]).await?.pop();
        self.metrics
            .observe("NodeUnprepareResource", start.elapsed().as_secs_f64());
        match result {
            Some(Ok(())) => Ok(Response::new(v1alpha2::NodeUnprepareResourceResponse {})),
            Some(Err(e)) => Err(Status::failed_precondition(e.to_string())),
            None => Err(Status::internal("no result")),
        }
    }
}

#[tonic::async_trait]
impl<D: DeviceProfile> v1alpha3::node_server::Node for NodeService<D> {
    type NodeListAndWatchResourcesStream =
        tonic::codegen::BoxStream<v1alpha3::NodeListAndWatchResourcesResponse>;

    async fn node_prepare_resources(
        &self,
        request: Request<v1alpha3::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1alpha3::NodePrepareResourcesResponse>, Status> {
        let start = Instant::now();
        let (claims, refused) = one_per_uid(request.into_inner().claims, |c| &c.uid);
        let read = claims
            .iter()
            .map(|c| self.read_handle(&c.uid, &c.namespace, &c.name, &c.resource_handle))
            .collect();
        let outcomes = self.prepare(read).await?;
        let mut response = v1alpha3::NodePrepareResourcesResponse::default();
        for (uid, error) in refused {
            self.metrics.claim::<()>("prepare", &Err(error.clone()));
            response.insert(
                uid,
                v1alpha3::NodePrepareResourceResponse {
                    cdi_devices: vec![],
                    error: error.to_string(),
                },
            );
        }
        for (claim, outcome) in claims.into_iter().zip(outcomes) {
            let entry = match outcome {
                Ok((c, prepared)) => v1alpha3::NodePrepareResourceResponse {
                    cdi_devices: self.claim_ids(&c, &prepared),
                    error: String::new(),
                },
                Err(e) => v1alpha3::NodePrepareResourceResponse {
                    cdi_devices: vec![],
                    error: e.to_string(),
                },
            };
            response.insert(claim.uid, entry);
        }
        self.metrics
            .observe("NodePrepareResources", start.elapsed().as_secs_f64());
        Ok(Response::new(response))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1alpha3::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1alpha3::NodeUnprepareResourcesResponse>, Status> {
        let start = Instant::now();
        let (claims, refused) = one_per_uid(request.into_inner().claims, |c| &c.uid);
        let refs = claims
            .iter()
            .map(|c| ClaimRef::new(&c.uid, &c.namespace, &c.name).map_err(ClaimError::from))
            .collect();
        let outcomes = self.unprepare(refs).await?;
        let mut response = v1alpha3::NodeUnprepareResourcesResponse::default();
        for (uid, error) in refused {
            self.metrics.claim::<()>("unprepare", &Err(error.clone()));
            response.insert(
                uid,
                v1alpha3::NodeUnprepareResourceResponse {
                    error: error.to_string(),
                },
            );
        }
        for (claim, outcome) in claims.into_iter().zip(outcomes) {
            response.insert(
                claim.uid,
                v1alpha3::NodeUnprepareResourceResponse {
                    error: outcome.err().map(|e| e.to_string()).unwrap_or_default(),
                },
            );
        }
        self.metrics
            .observe("NodeUnprepareResources", start.elapsed().as_secs_f64());
        Ok(Response::new(response))
    }

    async fn node_list_and_watch_resources(
        &self,
        _: Request<v1alpha3::NodeListAndWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeListAndWatchResourcesStream>, Status> {
        // The kubelet takes Unimplemented as "this plugin publishes no structured resources".
        Err(Status::unimplemented(
            "NodeListAndWatchResources: this driver uses classic (controller) allocation",
        ))
    }
}
