package health

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/khw-dev/khw/internal/remote"
)

// HAProxyStatsAddr is where khw's haproxy.cfg serves its stats page, on the
// load balancer only (templates/node/loadbalancer/haproxy.cfg.tmpl).
const HAProxyStatsAddr = "127.0.0.1:8404"

// HAProxyServer is one server of HAProxy's stats: a row of its CSV ("show
// stat", https://docs.haproxy.org/2.8/management.html#9.1) that is neither
// a FRONTEND nor a BACKEND line.
type HAProxyServer struct {
	// Backend is the proxy (pxname) and Name the server (svname).
	Backend, Name string
	// Addr is the server's "ip:port" (column addr; "" when the CSV lacks it).
	Addr string
	// Status is "UP", "DOWN", "UP 1/2" (going down), "DOWN 1/2" (going up),
	// "MAINT", "no check".
	Status string
	// Backup is true for a backup server (bck = 1), which takes traffic
	// only when no active server is up.
	Backup bool
	// Check is the last health check's result (check_status, e.g. L7OK,
	// L4CON, L7STS, L6TOUT, with check_code when there is one, e.g. "L7STS
	// 401") and LastCheck its text (last_chk, e.g. "Connection refused").
	// A check_code of 0 is no HTTP status (HAProxy shows it while a check
	// runs) and is left out.
	Check, LastCheck string
	// CheckRunning is true when a check was under way as the page was read:
	// HAProxy then prefixes check_status with "* " (management guide,
	// column 36), and Check is the last finished check's result.
	CheckRunning bool
	// Sessions is how many connections the server got since HAProxy
	// started (stot).
	Sessions int64
}

// Up reports whether HAProxy sends new connections to s: an active server
// whose status is UP or going down (UP 1/2), or that is not checked.
func (s HAProxyServer) Up() bool {
	return !s.Backup && (strings.HasPrefix(s.Status, "UP") || s.Status == "no check")
}

// ParseHAProxyStats reads HAProxy's stats CSV (a header line "# pxname,
// svname,…" then one line per proxy and server) and returns its servers in
// order. Errors: no header, or a header without pxname, svname or status.
func ParseHAProxyStats(data []byte) ([]HAProxyServer, error) {
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(string(data), "# ")))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("HAProxy stats CSV: %w", err)
	}
	if len(rows) == 0 {
		return nil, errors.New("HAProxy stats CSV is empty")
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[strings.TrimSpace(h)] = i
	}
	for _, need := range []string{"pxname", "svname", "status"} {
		if _, ok := col[need]; !ok {
			header := strings.Join(rows[0], ",")
			if len(header) > 120 {
				header = header[:120] + "…"
			}
			return nil, fmt.Errorf("HAProxy stats CSV header lacks pxname/svname/status: %q", header)
		}
	}
	var out []HAProxyServer
	for _, row := range rows[1:] {
		get := func(name string) string {
			if i, ok := col[name]; ok && i < len(row) {
				return row[i]
			}
			return ""
		}
		if sv := get("svname"); sv == "" || sv == "FRONTEND" || sv == "BACKEND" {
			continue
		}
		s := HAProxyServer{Backend: get("pxname"), Name: get("svname"), Addr: get("addr"), Status: get("status"),
			Backup: get("bck") == "1", Check: get("check_status"), LastCheck: get("last_chk")}
		if rest, ok := strings.CutPrefix(s.Check, "* "); ok {
			s.Check, s.CheckRunning = rest, true
		}
		if code := get("check_code"); code != "" && code != "0" && s.Check != "" {
			s.Check += " " + code
		}
		s.Sessions, _ = strconv.ParseInt(get("stot"), 10, 64)
		out = append(out, s)
	}
	return out, nil
}

// ReadHAProxyStats reads the stats page at HAProxyStatsAddr through dial
// (a connection opened on the load balancer itself, e.g. an SSH tunnel),
// on a new connection. Errors: the page cannot be reached or read, it
// answers other than 200, or ParseHAProxyStats's.
func ReadHAProxyStats(ctx context.Context, dial remote.DialFunc) ([]HAProxyServer, error) {
	client := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+HAProxyStatsAddr+"/stats;csv", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("stats page: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stats page: HTTP %d", resp.StatusCode)
	}
	return ParseHAProxyStats(data)
}
