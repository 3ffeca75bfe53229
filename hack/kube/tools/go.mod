// Small programs of our own for the local real cluster (no dependencies):
//   pause       the pod sandbox ("infra") container's process
//   ociarchive  writes an OCI image layout archive from a directory, for `ctr images import`
module fake-dra.local/hack/kube/tools

go 1.26.0
