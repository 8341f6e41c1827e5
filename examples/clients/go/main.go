// Calling sluiced from Go, standard library only (net/http).
//
// check: one POST /v1/check before the work it guards.
//
//	200       go on;
//	429       refuse (or wait): Retry-After says how many seconds, RateLimit which limit
//	          and what is left;
//	5xx, or sluiced not reachable within the client's timeout (250 ms;
//	          SLUICED_TIMEOUT_MS): the route's own choice, as Envoy's failure_mode_deny:
//	          fail open (serve: the route is worth more than the limit) or fail closed
//	          (refuse: the limit protects something, e.g. sign-in);
//	other 4xx a bug in the caller (unknown domain, malformed body): an error.
//
// withLease: a concurrency slot: acquire, heartbeat every lease_ttl / 3, release in a defer.
//
//	go run main.go check http://127.0.0.1:8080 shop --fail closed route=sign_in account=alice
//	go run main.go lease http://127.0.0.1:8080 shop --hold-ms 2000 streams account=alice
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// A limit check guards a request: it must not hold it long. sluiced answers in a
// millisecond or two; past this, the route's failure choice decides.
var client = &http.Client{Timeout: timeout()}

func timeout() time.Duration {
	if ms, err := strconv.Atoi(os.Getenv("SLUICED_TIMEOUT_MS")); err == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return 250 * time.Millisecond
}

type entry struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

func call(method, url string, body any, answer any) (*http.Response, error) {
	var payload []byte
	if body != nil {
		payload, _ = json.Marshal(body)
	}
	req, err := http.NewRequest(method, url, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if answer != nil && resp.StatusCode < 300 {
		err = json.NewDecoder(resp.Body).Decode(answer)
	}
	return resp, err
}

// check says whether to serve the request, and why (a line to log).
func check(base, domain string, entries []entry, failOpen bool) (bool, string, error) {
	body := map[string]any{"domain": domain, "descriptors": []any{map[string]any{"entries": entries}}}
	resp, err := call("POST", base+"/v1/check", body, nil)
	if err != nil { // refused, reset, timed out
		allowed, why := failureChoice("sluiced unreachable: "+err.Error(), failOpen)
		return allowed, why, nil
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return true, "allowed (200) RateLimit: " + resp.Header.Get("RateLimit"), nil
	case resp.StatusCode == http.StatusTooManyRequests:
		return false, fmt.Sprintf("refused (429): retry after %s s; RateLimit: %s; RateLimit-Policy: %s",
			resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"),
			resp.Header.Get("RateLimit-Policy")), nil
	case resp.StatusCode >= 500:
		allowed, why := failureChoice(fmt.Sprintf("sluiced answered %d", resp.StatusCode), failOpen)
		return allowed, why, nil
	}
	return false, "", fmt.Errorf("sluiced refused the call (%d)", resp.StatusCode)
}

func failureChoice(why string, failOpen bool) (bool, string) {
	if failOpen {
		return true, "allowed (" + why + "; this route fails open)"
	}
	return false, "refused (" + why + "; this route fails closed)"
}

// withLease runs work holding one slot of a concurrency limit; work's context is cancelled
// if the lease is lost (not heartbeaten within lease_ttl): stop the work then. An error
// when no slot is free (429) or sluiced cannot grant one.
func withLease(base, domain string, entries []entry, work func(context.Context)) error {
	var grant struct {
		Lease      string `json:"lease"`
		LeaseTTLMs int64  `json:"lease_ttl_ms"`
	}
	body := map[string]any{"domain": domain, "entries": entries}
	resp, err := call("POST", base+"/v1/leases", body, &grant)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("lease refused (%d): retry after %s s", resp.StatusCode,
			resp.Header.Get("Retry-After"))
	}
	url := base + "/v1/leases/" + grant.Lease
	interval := time.Duration(grant.LeaseTTLMs) * time.Millisecond / 3
	fmt.Printf("lease acquired (ttl %d ms, heartbeat every %d ms)\n", grant.LeaseTTLMs,
		interval.Milliseconds())
	ctx, lost := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			var held struct {
				ExpiresInMs int64 `json:"expires_in_ms"`
			}
			resp, err := call("POST", url+"/heartbeat", nil, &held)
			switch {
			case err != nil: // try again next time: one miss costs nothing
				fmt.Println("heartbeat failed:", err)
			case resp.StatusCode == http.StatusOK:
				fmt.Printf("heartbeat: held, expires in %d ms\n", held.ExpiresInMs)
			case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
				fmt.Printf("lease lost (%d)\n", resp.StatusCode) // its slot may be someone else's now
				lost()
				return
			}
		}
	}()
	defer func() {
		lost()
		<-stopped
		resp, err := call("DELETE", url, nil, nil)
		if err != nil { // the slot frees lease_ttl after the last heartbeat
			fmt.Println("release failed:", err)
			return
		}
		fmt.Printf("lease released (%d)\n", resp.StatusCode) // 204; 202: sluiced retries it for us
	}()
	work(ctx)
	return nil
}

func parseEntries(args []string) []entry {
	entries := make([]entry, 0, len(args))
	for _, a := range args {
		key, value, _ := strings.Cut(a, "=")
		entries = append(entries, entry{Key: key, Value: value})
	}
	return entries
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr,
			"usage: main check|lease BASE DOMAIN [--fail open|closed] [--hold-ms N] key=value...")
		os.Exit(2)
	}
	flags := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fail := flags.String("fail", "closed",
		"open or closed: what this route does when sluiced cannot answer")
	holdMs := flags.Int("hold-ms", 1000, "how long the work holds the lease")
	flags.Parse(os.Args[2:])
	// Flags may also follow the base URL and domain, as the other examples take them.
	args := flags.Args()
	if len(args) > 2 {
		flags.Parse(args[2:])
		args = append(args[:2:2], flags.Args()...)
	}
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "need BASE DOMAIN and at least one key=value")
		os.Exit(2)
	}
	base, domain, entries := args[0], args[1], parseEntries(args[2:])
	switch os.Args[1] {
	case "check":
		_, why, err := check(base, domain, entries, *fail == "open")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(why)
	case "lease":
		err := withLease(base, domain, entries, func(ctx context.Context) {
			select { // the work, stopped early if the lease is lost
			case <-time.After(time.Duration(*holdMs) * time.Millisecond):
			case <-ctx.Done():
			}
		})
		if err != nil {
			fmt.Println(err)
		}
	}
}
