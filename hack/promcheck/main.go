// promcheck parses a /metrics response as Prometheus does: the parser is chosen by the
// response's Content-Type (textparse.New, as the scrape loop does), with no fallback, so a
// response without a valid Content-Type fails as Prometheus 3 fails such a scrape, and
// every entry is read until the end or the first error. Prints the samples it read per
// metric family; exits 1 with the parser's error.
//
// Usage: promcheck URL
package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: promcheck URL")
		os.Exit(2)
	}
	if err := check(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "promcheck %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func check(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	contentType := resp.Header.Get("Content-Type")
	parser, err := textparse.New(body, contentType, labels.NewSymbolTable(), textparse.ParserOptions{})
	if err != nil {
		return fmt.Errorf("Content-Type %q: %w", contentType, err)
	}
	if parser == nil {
		return fmt.Errorf("Content-Type %q: Prometheus picks no parser for it", contentType)
	}
	samples := map[string]int{}
	for {
		entry, err := parser.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("Content-Type %q: %w", contentType, err)
		}
		if entry == textparse.EntrySeries {
			var lset labels.Labels
			parser.Labels(&lset)
			samples[lset.Get(labels.MetricName)]++
		}
	}
	names := make([]string, 0, len(samples))
	for name := range samples {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Printf("Content-Type: %s\n", contentType)
	for _, name := range names {
		fmt.Printf("%s %d\n", name, samples[name])
	}
	return nil
}
