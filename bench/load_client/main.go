// The latency benchmark's client: it sends one request body to an extender verb over mutual TLS,
// from `-concurrency` goroutines with one keep-alive connection each, as kube-scheduler (also Go)
// calls an extender, and prints each call's duration. A Python client on the same two cores spent
// more CPU per call than the server it measured, so its queueing showed in the server's figures.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync"
	"time"
)

type result struct {
	LatenciesSeconds []float64 `json:"latencies_seconds"`
	WallSeconds      float64   `json:"wall_seconds"`
}

func main() {
	url := flag.String("url", "", "the verb's URL, https://host:port/scheduler/filter")
	bodyFile := flag.String("body", "", "file holding the request body (ExtenderArgs as JSON)")
	cert := flag.String("cert", "", "client certificate (PEM)")
	key := flag.String("key", "", "client key (PEM)")
	cacert := flag.String("cacert", "", "CA that signed the server's certificate (PEM)")
	concurrency := flag.Int("concurrency", 1, "callers at once, one connection each")
	requests := flag.Int("requests", 100, "calls in all, shared out among the callers")
	flag.Parse()

	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		log.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatal(err)
	}
	caPEM, err := os.ReadFile(*cacert)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		log.Fatalf("no certificate in %s", *cacert)
	}
	tlsConfig := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}

	perCaller := max(1, *requests / *concurrency)
	latencies := make([][]float64, *concurrency)
	failures := make(chan error, *concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range *concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{
				TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 1, DisableCompression: true}}
			defer client.CloseIdleConnections()
			if err := call(client, *url, body); err != nil { // warm the connection
				failures <- err
				return
			}
			own := make([]float64, 0, perCaller)
			for range perCaller {
				t0 := time.Now()
				if err := call(client, *url, body); err != nil {
					failures <- err
					return
				}
				own = append(own, time.Since(t0).Seconds())
			}
			latencies[i] = own
		}()
	}
	wg.Wait()
	wall := time.Since(start).Seconds()
	close(failures)
	for err := range failures {
		log.Fatal(err)
	}
	out := result{WallSeconds: wall}
	for _, own := range latencies {
		out.LatenciesSeconds = append(out.LatenciesSeconds, own...)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		log.Fatal(err)
	}
}

// call sends one request and reads the whole answer, as the scheduler decodes it.
func call(client *http.Client, url string, body []byte) error {
	response, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer response.Body.Close()
	if _, err := io.Copy(io.Discard, response.Body); err != nil {
		return err
	}
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, response.Status)
	}
	return nil
}
