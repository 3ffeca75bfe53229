// Command ociarchive writes a one-layer container image as an OCI image layout archive
// (https://github.com/opencontainers/image-spec/blob/main/image-layout.md) that
// `ctr -n k8s.io images import` takes, from a directory that is the image's root file
// system. No base image and no registry: the local real cluster (hack/local-cluster.sh)
// cannot pull anything, so its images (pause, busybox, fake-dra) are made this way.
//
//	ociarchive -rootfs DIR -name docker.io/library/fake-dra:dev -o fake-dra.tar \
//	  -entrypoint /usr/bin/fake-dra-controller -user 65532:65532
//
// The archive is reproducible: entries are sorted, owned by 0:0 (the directory's file
// modes are kept) and dated 1970-01-01, so the same rootfs gives the same image digest.
// The layer is stored uncompressed (media type ...layer.v1.tar), which containerd accepts.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type imageConfig struct {
	User       string   `json:"User,omitempty"`
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

type image struct {
	Created      string      `json:"created"`
	Architecture string      `json:"architecture"`
	OS           string      `json:"os"`
	Config       imageConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	} `json:"history"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

var epoch = time.Unix(0, 0).UTC()

func main() {
	var (
		rootfs, name, out, user, workdir, arch string
		entrypoint, cmd, env                   stringList
	)
	flag.StringVar(&rootfs, "rootfs", "", "directory that becomes the image's root file system (required)")
	flag.StringVar(&name, "name", "", "full image reference, e.g. docker.io/library/busybox:1.36 (required)")
	flag.StringVar(&out, "o", "", "archive to write (required)")
	flag.StringVar(&user, "user", "", "image config User, e.g. 65532:65532")
	flag.StringVar(&workdir, "workdir", "", "image config WorkingDir")
	flag.StringVar(&arch, "arch", "amd64", "image architecture")
	flag.Var(&entrypoint, "entrypoint", "an Entrypoint element (repeat for each)")
	flag.Var(&cmd, "cmd", "a Cmd element (repeat for each)")
	flag.Var(&env, "env", "an Env entry KEY=VALUE (repeat for each)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: ociarchive -rootfs DIR -name REF -o OUT.tar [-entrypoint E]... [-cmd C]... [-env K=V]... [-user U] [-workdir D]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if rootfs == "" || name == "" || out == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(rootfs, name, out, arch, imageConfig{User: user, Env: env, Entrypoint: entrypoint, Cmd: cmd, WorkingDir: workdir}); err != nil {
		fmt.Fprintln(os.Stderr, "ociarchive:", err)
		os.Exit(1)
	}
}

func run(rootfs, name, out, arch string, cfg imageConfig) error {
	tag := name[strings.LastIndex(name, "/")+1:]
	if i := strings.LastIndex(tag, ":"); i < 0 || i == len(tag)-1 {
		return fmt.Errorf("image name %q has no tag", name)
	} else {
		tag = tag[i+1:]
	}
	layer, err := layerTar(rootfs)
	if err != nil {
		return fmt.Errorf("layer from %s: %w", rootfs, err)
	}
	layerDesc := describe(mediaTypeLayer, layer)

	var img image
	img.Created = epoch.Format(time.RFC3339)
	img.Architecture = arch
	img.OS = "linux"
	img.Config = cfg
	img.RootFS.Type = "layers"
	img.RootFS.DiffIDs = []string{layerDesc.Digest} // uncompressed: diff id = layer digest
	img.History = append(img.History, struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	}{img.Created, "ociarchive -rootfs " + filepath.Base(rootfs)})
	configJSON, err := json.Marshal(img)
	if err != nil {
		return err
	}
	configDesc := describe(mediaTypeConfig, configJSON)

	manifestJSON, err := json.Marshal(manifest{SchemaVersion: 2, MediaType: mediaTypeManifest, Config: configDesc, Layers: []descriptor{layerDesc}})
	if err != nil {
		return err
	}
	manifestDesc := describe(mediaTypeManifest, manifestJSON)
	manifestDesc.Platform = &platform{Architecture: arch, OS: "linux"}
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          name, // what ctr import names the image
		"org.opencontainers.image.ref.name": tag,
	}
	indexJSON, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{manifestDesc}})
	if err != nil {
		return err
	}

	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	files := []struct {
		path string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexJSON},
		{blobPath(configDesc), configJSON},
		{blobPath(manifestDesc), manifestJSON},
		{blobPath(layerDesc), layer},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, archive.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Printf("%s: %s (manifest %s, layer %d bytes)\n", out, name, manifestDesc.Digest, layerDesc.Size)
	return nil
}

func describe(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func blobPath(d descriptor) string {
	return "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
}

// layerTar returns the directory as a tar stream: sorted, owned by 0:0, dated 1970.
// Regular files, directories and symbolic links only; hard links are stored as copies.
func layerTar(root string) ([]byte, error) {
	var paths []string
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil, err
		}
		rel = filepath.ToSlash(rel)
		info, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), ModTime: epoch, Format: tar.FormatPAX}
		if info.Mode()&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		var content io.Reader // an *os.File for regular files
		switch {
		case info.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return nil, err
			}
			hdr.Typeflag, hdr.Size, content = tar.TypeReg, info.Size(), f
		default:
			return nil, errors.New(p + ": only files, directories and symbolic links can go into an image")
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if f, ok := content.(*os.File); ok {
			_, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
