package emulator

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// xrayDaemon is the X-Ray daemon Lambda runs beside a traced function: it
// counts the segment documents the function sends over UDP.
type xrayDaemon struct {
	conn     *net.UDPConn
	segments atomic.Int64
}

func startXRayDaemon() (*xrayDaemon, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	x := &xrayDaemon{conn: conn}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if n > 0 {
				x.segments.Add(1)
			}
		}
	}()
	return x, nil
}

func (x *xrayDaemon) addr() string { return x.conn.LocalAddr().String() }

func (x *xrayDaemon) close() { _ = x.conn.Close() }

// traceHeader is a sampled Lambda trace header (Lambda-Runtime-Trace-Id) for
// a new trace, as Lambda gives a traced function each invocation.
func traceHeader() string {
	id := make([]byte, 12)
	parent := make([]byte, 8)
	_, _ = rand.Read(id)
	_, _ = rand.Read(parent)
	return fmt.Sprintf("Root=1-%s-%s;Parent=%s;Sampled=1", strconv.FormatInt(time.Now().Unix(), 16), hex.EncodeToString(id), hex.EncodeToString(parent))
}
