// The Go peer of bench/admit_bench.py: a mutating and validating admission webhook written as a Go developer would
// write one with the standard library only (net/http, crypto/tls, encoding/json), doing the same decision as admit
// for the benchmark's pod mixes.
//
//	gowebhook -addr 127.0.0.1:8443 -cert tls.crt -key tls.key
//
// POST /mutate and /validate read an AdmissionReview (admission.k8s.io/v1 or v1beta1, at most 3 MiB, as admit's
// --max-body-bytes), decode request.object as a Pod's metadata and spec.schedulerName, and answer with the request's
// uid: a Pod that already carries the scheduling.x-k8s.io/pod-group label (the known-group mix), or no
// gang.admit.dev/ annotation (the no-group mix), is allowed unchanged; a Pod with gang.admit.dev/min-member and
// gang.admit.dev/pod-group but no label gets admit's JSONPatch (the label and schedulerName). Any other kind is
// allowed unchanged: this peer makes no Kubernetes API call, so the deployment and scale mixes measure only its HTTP
// and JSON work. A body that is not an AdmissionReview gets HTTP 400. GET /healthz answers ok. SIGTERM stops it after
// the requests in flight (http.Server.Shutdown).
package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const (
	maxBody      = 3 << 20
	groupLabel   = "scheduling.x-k8s.io/pod-group"
	scheduler    = "scheduler-plugins-scheduler"
	prefix       = "gang.admit.dev/"
	minMemberKey = prefix + "min-member"
	podGroupKey  = prefix + "pod-group"
)

type groupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

type podObject struct {
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		SchedulerName string `json:"schedulerName"`
	} `json:"spec"`
}

type admissionRequest struct {
	UID       string           `json:"uid"`
	Kind      groupVersionKind `json:"kind"`
	Namespace string           `json:"namespace"`
	Operation string           `json:"operation"`
	Object    json.RawMessage  `json:"object"`
	OldObject json.RawMessage  `json:"oldObject"`
	DryRun    *bool            `json:"dryRun"`
}

type admissionReview struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Request    *admissionRequest `json:"request"`
}

type admissionResponse struct {
	UID       string `json:"uid"`
	Allowed   bool   `json:"allowed"`
	PatchType string `json:"patchType,omitempty"`
	Patch     string `json:"patch,omitempty"`
}

type reviewAnswer struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Response   admissionResponse `json:"response"`
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// podPatch is admit's answer for a Pod: nothing for one that names its group or carries no gang annotation; the
// group label and schedulerName for a bare pod with gang.admit.dev/min-member and gang.admit.dev/pod-group.
func podPatch(raw json.RawMessage) ([]patchOp, error) {
	var pod podObject
	if err := json.Unmarshal(raw, &pod); err != nil {
		return nil, err
	}
	if _, named := pod.Metadata.Labels[groupLabel]; named {
		return nil, nil
	}
	group, ok := pod.Metadata.Annotations[podGroupKey]
	if _, sized := pod.Metadata.Annotations[minMemberKey]; !ok || !sized {
		return nil, nil
	}
	var ops []patchOp
	if pod.Metadata.Labels == nil {
		ops = append(ops, patchOp{"add", "/metadata/labels", map[string]string{groupLabel: group}})
	} else {
		ops = append(ops, patchOp{"add", "/metadata/labels/" + strings.ReplaceAll(groupLabel, "/", "~1"), group})
	}
	return append(ops, patchOp{"add", "/spec/schedulerName", scheduler}), nil
}

func badRequest(w http.ResponseWriter, reason string) {
	http.Error(w, "bad request: "+reason, http.StatusBadRequest)
}

func review(mutating bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" {
			badRequest(w, "Content-Type is not application/json")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			badRequest(w, err.Error())
			return
		}
		var in admissionReview
		if err := json.Unmarshal(body, &in); err != nil {
			badRequest(w, "body is not valid JSON: "+err.Error())
			return
		}
		if in.Kind != "AdmissionReview" || in.Request == nil || in.Request.UID == "" ||
			(in.APIVersion != "admission.k8s.io/v1" && in.APIVersion != "admission.k8s.io/v1beta1") {
			badRequest(w, "not an AdmissionReview request")
			return
		}
		out := reviewAnswer{APIVersion: in.APIVersion, Kind: "AdmissionReview",
			Response: admissionResponse{UID: in.Request.UID, Allowed: true}}
		if in.Request.Kind.Group == "" && in.Request.Kind.Kind == "Pod" && len(in.Request.Object) > 0 {
			ops, err := podPatch(in.Request.Object)
			if err != nil {
				badRequest(w, "request.object is not a Pod: "+err.Error())
				return
			}
			if mutating && len(ops) > 0 {
				patch, _ := json.Marshal(ops)
				out.Response.PatchType = "JSONPatch"
				out.Response.Patch = base64.StdEncoding.EncodeToString(patch)
			}
		}
		answer, _ := json.Marshal(out)
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "host:port to serve HTTPS on")
	cert := flag.String("cert", "tls.crt", "serving certificate (PEM)")
	key := flag.String("key", "tls.key", "its private key (PEM)")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mutate", review(true))
	mux.HandleFunc("POST /validate", review(false))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	srv := &http.Server{
		Addr:              *addr,
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          log.New(os.Stderr, "gowebhook: ", 0),
	}
	done := make(chan struct{})
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		close(done)
	}()
	if err := srv.ListenAndServeTLS(*cert, *key); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-done
}
