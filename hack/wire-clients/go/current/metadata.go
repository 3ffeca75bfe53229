package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
)

// metadataResult is one line of `wire-client-go metadata FILE...`: what the upstream
// reader of device metadata files (KEP-5304) made of a file a plugin wrote.
type metadataResult struct {
	File string `json:"file"`
	OK   bool   `json:"ok"`
	// Error is why the stream could not be decoded.
	Error string `json:"error,omitempty"`
	// Decoded is the group/version the reader took from the stream.
	Decoded string `json:"decoded,omitempty"`
	// Invalid is what upstream's declarative validation said of it, if anything.
	Invalid  string                          `json:"invalid,omitempty"`
	Metadata *metadatav1beta1.DeviceMetadata `json:"metadata,omitempty"`
}

// decodeMetadataFiles decodes each file with devicemetadata.DecodeMetadataFromStream,
// as a workload reading /var/run/kubernetes.io/dra-device-attributes would, into the
// v1beta1 type (a v1alpha1-only stream is converted), with validation.
func decodeMetadataFiles(files []string) {
	enc := json.NewEncoder(os.Stdout)
	for _, file := range files {
		result := metadataResult{File: file}
		data, err := os.ReadFile(file)
		if err == nil {
			var dm metadatav1beta1.DeviceMetadata
			var gvk schema.GroupVersionKind
			var invalid error
			err = devicemetadata.DecodeMetadataFromStream(
				json.NewDecoder(bytes.NewReader(data)), &dm,
				devicemetadata.DecodeMetadataStoreGVKResult(&gvk),
				devicemetadata.DecodeMetadataWithValidationResult(&invalid),
			)
			if err == nil {
				result.OK = true
				result.Decoded = gvk.GroupVersion().String()
				result.Metadata = &dm
				if invalid != nil {
					result.Invalid = invalid.Error()
				}
			}
		}
		if err != nil {
			result.Error = err.Error()
		}
		if err := enc.Encode(result); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
