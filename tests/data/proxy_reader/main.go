// A PROXY protocol v2 reader for snirelay's interop tests, built on the
// maintained go-proxyproto library (Debian: golang-github-pires-go-proxyproto-dev,
// built without network as a GOPATH program: tests/it/proxy_tlvs.rs does it).
//
// It listens on 127.0.0.1 (an ephemeral port), prints "listening ADDR",
// and for each connection prints one JSON line saying what the library
// read: the addresses, every TLV (type and hex value, in order), the AWS
// VPC endpoint id and SSL TLV as the library's own tlvparse decodes them,
// and the first bytes after the header.
package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	proxyproto "github.com/pires/go-proxyproto"
	"github.com/pires/go-proxyproto/tlvparse"
)

type tlv struct {
	Type int    `json:"type"`
	Hex  string `json:"hex"`
}

type record struct {
	Error       string `json:"error"`
	Source      string `json:"source"`
	Destination string `json:"destination"`
	TLVs        []tlv  `json:"tlvs"`
	AWSVPCE     string `json:"aws_vpce"`
	SSLFound    bool   `json:"ssl_found"`
	SSLClient   bool   `json:"ssl_client"`
	SSLVerified bool   `json:"ssl_verified"`
	After       string `json:"after_hex"`
}

var out sync.Mutex

func main() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening %s\n", l.Addr())
	listener := &proxyproto.Listener{Listener: l}
	for {
		conn, err := listener.Accept()
		if err != nil {
			return
		}
		go serve(conn.(*proxyproto.Conn))
	}
}

func serve(conn *proxyproto.Conn) {
	defer conn.Close()
	rec := record{TLVs: []tlv{}}
	// The TLS record header of the replayed hello: reading it makes the
	// library read the PROXY header first.
	after := make([]byte, 5)
	if _, err := io.ReadFull(conn, after); err != nil {
		rec.Error = err.Error()
	}
	rec.After = hex.EncodeToString(after)
	if header := conn.ProxyHeader(); header != nil {
		rec.Source = header.SourceAddr.String()
		rec.Destination = header.DestinationAddr.String()
		tlvs, err := header.TLVs()
		if err != nil {
			rec.Error = err.Error()
		}
		for _, t := range tlvs {
			rec.TLVs = append(rec.TLVs, tlv{Type: int(t.Type), Hex: hex.EncodeToString(t.Value)})
		}
		rec.AWSVPCE = tlvparse.FindAWSVPCEndpointID(tlvs)
		if ssl, ok := tlvparse.FindSSL(tlvs); ok {
			rec.SSLFound = true
			rec.SSLClient = ssl.ClientSSL()
			rec.SSLVerified = ssl.Verified()
		}
	} else if rec.Error == "" {
		rec.Error = "no PROXY header"
	}
	line, _ := json.Marshal(rec)
	out.Lock()
	fmt.Println(string(line))
	out.Unlock()
}
