// The Go client of tests/data/go_crypto_tls.bin (see ../README.md): one
// HTTPS GET through net/http to 127.0.0.1:PORT, SNI go.example.com.

package main

import (
	"crypto/tls"
	"net/http"
	"os"
	"time"
)

func main() {
	client := &http.Client{
		Timeout:   3 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: "go.example.com", InsecureSkipVerify: true}, ForceAttemptHTTP2: true},
	}
	client.Get("https://127.0.0.1:" + os.Args[1] + "/")
}
