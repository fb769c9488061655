// The floor of a kube-scheduler extender: it decides nothing and does as little as an extender
// can. Filter answers every node it was sent as passing, prioritize scores every node 0, over
// mutual TLS as tas-extender serves. The throughput benchmark measures it beside tas-extender on
// the same cluster: what is left is the scheduler's two synchronous calls per pod.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
)

// filterCalls counts the filter calls answered, for GET /metrics: the benchmark checks that the
// scheduler asked the extender about every pod of a run.
var filterCalls atomic.Int64

// args is the part of the scheduler's ExtenderArgs an extender must read to answer: the
// candidate names (nodeCacheCapable) or the Node objects, which filter hands back unread.
type args struct {
	Nodes     json.RawMessage `json:"Nodes"`
	NodeNames *[]string       `json:"NodeNames"`
}

type nodeList struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	} `json:"items"`
}

type filterResult struct {
	Nodes       json.RawMessage   `json:"Nodes"`
	NodeNames   *[]string         `json:"NodeNames"`
	FailedNodes map[string]string `json:"FailedNodes"`
	Error       string            `json:"Error"`
}

type hostPriority struct {
	Host  string `json:"Host"`
	Score int64  `json:"Score"`
}

func decode(w http.ResponseWriter, r *http.Request) (*args, bool) {
	var a args
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
		refuse(w, err)
		return nil, false
	}
	return &a, true
}

func reply(w http.ResponseWriter, body any) {
	answer(w, http.StatusOK, body)
}

func refuse(w http.ResponseWriter, err error) {
	answer(w, http.StatusBadRequest, map[string]string{"Error": err.Error()})
}

func answer(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(body); err != nil {
		log.Printf("answer not sent: %v", err)
	}
}

func filter(w http.ResponseWriter, r *http.Request) {
	a, ok := decode(w, r)
	if !ok {
		return
	}
	nodes := a.Nodes
	if len(nodes) == 0 {
		nodes = json.RawMessage("null")
	}
	reply(w, filterResult{Nodes: nodes, NodeNames: a.NodeNames, FailedNodes: map[string]string{}})
	filterCalls.Add(1)
}

func prioritize(w http.ResponseWriter, r *http.Request) {
	a, ok := decode(w, r)
	if !ok {
		return
	}
	var names []string
	if a.NodeNames != nil {
		names = *a.NodeNames
	} else if len(a.Nodes) > 0 {
		var list nodeList
		if err := json.Unmarshal(a.Nodes, &list); err != nil {
			refuse(w, err)
			return
		}
		for _, item := range list.Items {
			names = append(names, item.Metadata.Name)
		}
	}
	scores := make([]hostPriority, len(names))
	for i, name := range names {
		scores[i] = hostPriority{Host: name}
	}
	reply(w, scores)
}

func serverTLS(cert, key, cacert string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("--cert/--key: %w", err)
	}
	pem, err := os.ReadFile(cacert)
	if err != nil {
		return nil, fmt.Errorf("--cacert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", cacert)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 9101, "port to listen on")
	cert := flag.String("cert", "", "server certificate (PEM)")
	key := flag.String("key", "", "server key (PEM)")
	cacert := flag.String("cacert", "", "CA that signs the clients' certificates (PEM)")
	flag.Parse()
	if *cert == "" || *key == "" || *cacert == "" {
		fmt.Fprintln(os.Stderr, "floor-extender: --cert, --key and --cacert are required (mutual TLS)")
		os.Exit(2)
	}
	config, err := serverTLS(*cert, *key, *cacert)
	if err != nil {
		fmt.Fprintf(os.Stderr, "floor-extender: %v\n", err)
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /scheduler/filter", filter)
	mux.HandleFunc("POST /scheduler/prioritize", prioritize)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { reply(w, map[string]string{"status": "ready"}) })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "floor_extender_requests_total{verb=\"filter\"} %d\n", filterCalls.Load())
	})
	server := &http.Server{Addr: net.JoinHostPort(*host, strconv.Itoa(*port)), Handler: mux, TLSConfig: config}
	log.Fatal(server.ListenAndServeTLS("", ""))
}
