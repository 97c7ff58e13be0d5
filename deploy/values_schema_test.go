package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// The chart's values.schema.json is written by hand, except its policy and
// endpointPicker.upstream: those are the policy's JSON Schema
// (docs/config.schema.json, itself generated from package config's types),
// so that helm install, upgrade, template and lint refuse a misspelt or
// mistyped policy key, as gatekeeper would refuse the rendered policy
// after the release went out. TestChartSchemaFollowsPolicy fails when the
// file drifts from docs/config.schema.json; -update-chart-schema rewrites
// those two parts and keeps the rest as written:
//
//	go test ./deploy -run TestChartSchemaFollowsPolicy -update-chart-schema
var updateChartSchema = flag.Bool("update-chart-schema", false,
	"rewrite helm/gatekeeper/values.schema.json's policy and endpointPicker.upstream from docs/config.schema.json")

const (
	valuesSchemaPath = chart + "/values.schema.json"
	policySchemaPath = "../docs/config.schema.json"

	// policyDescription and pickerUpstreamDescription say what the chart
	// does with each part; the keys below them are the policy's own.
	policyDescription = "The gatekeeper policy (config.yaml at the repository root; docs/configuration.md); " +
		"this schema is docs/config.schema.json's. server.listen, server.admin_listen, cluster.replicas, " +
		"cluster.redis.url, cluster.redis.password_file and endpoint_picker are set by the chart, " +
		"and with endpointPicker.inferencePool.name the upstreams."
	pickerUpstreamDescription = "The upstream written for the pool: an upstreams[] entry of the policy " +
		"(docs/config.schema.json's), without inference_pool, which the chart sets; host \"pod\" stands for each pod's IP."
)

// TestChartSchemaFollowsPolicy: values.schema.json's policy and
// endpointPicker.upstream are docs/config.schema.json's.
func TestChartSchemaFollowsPolicy(t *testing.T) {
	t.Parallel()
	want := chartValuesSchema(t)
	if *updateChartSchema {
		if err := os.WriteFile(valuesSchemaPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(valuesSchemaPath)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s differs from docs/config.schema.json's policy (err %v); run: go test ./deploy -run TestChartSchemaFollowsPolicy -update-chart-schema",
			valuesSchemaPath, err)
	}
}

// chartValuesSchema is values.schema.json as it should be: the file as
// written, its key order kept, with policy and endpointPicker.upstream made
// from the policy's schema.
func chartValuesSchema(t *testing.T) []byte {
	t.Helper()
	values := readOrdered(t, valuesSchemaPath)
	policy := readOrdered(t, policySchemaPath)
	// The policy's root, less what names a document of its own: inside
	// values.schema.json it is one property's schema.
	for _, k := range []string{"$schema", "$id", "title"} {
		policy.del(k)
	}
	policy.set("type", "object") // not null: the chart needs a policy
	policy.set("description", policyDescription)
	ups := policy.path(t, "properties", "upstreams")
	ups.set("minItems", json.Number("1")) // the loader's "at least one", which the policy's schema leaves to it
	upstream := policy.path(t, "properties", "upstreams", "items").clone()
	upstream.set("type", "object")
	upstream.set("description", pickerUpstreamDescription)

	props := values.path(t, "properties")
	props.set("policy", policy)
	values.path(t, "properties", "endpointPicker", "properties").set("upstream", upstream)

	var buf bytes.Buffer
	writeJSON(&buf, values, "")
	buf.WriteByte('\n')
	return buf.Bytes()
}

// object is a JSON object that keeps its keys' order, so that the parts of
// values.schema.json written by hand stay as they are.
type object struct {
	keys []string
	vals map[string]any // *object, []any, string, json.Number, bool or nil
}

func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *object) del(k string) {
	if _, ok := o.vals[k]; !ok {
		return
	}
	delete(o.vals, k)
	for i, key := range o.keys {
		if key == k {
			o.keys = append(o.keys[:i:i], o.keys[i+1:]...)
			break
		}
	}
}

// path follows keys through nested objects, failing t where one is
// missing.
func (o *object) path(t *testing.T, keys ...string) *object {
	t.Helper()
	cur := o
	for i, k := range keys {
		next, ok := cur.vals[k].(*object)
		if !ok {
			t.Fatalf("schema: no object at %s", strings.Join(keys[:i+1], "."))
		}
		cur = next
	}
	return cur
}

// clone copies o deeply.
func (o *object) clone() *object {
	c := &object{keys: append([]string(nil), o.keys...), vals: make(map[string]any, len(o.vals))}
	for k, v := range o.vals {
		c.vals[k] = cloneValue(v)
	}
	return c
}

func cloneValue(v any) any {
	switch v := v.(type) {
	case *object:
		return v.clone()
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneValue(e)
		}
		return out
	}
	return v
}

// readOrdered decodes a JSON file whose top level is an object, keeping
// the order of every object's keys and numbers as written.
func readOrdered(t *testing.T, path string) *object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err == nil {
		if _, err = dec.Token(); errors.Is(err, io.EOF) {
			err = nil
		} else {
			err = errors.New("more than one value")
		}
	}
	o, ok := v.(*object)
	if err != nil || !ok {
		t.Fatalf("%s: not one JSON object (%v)", path, err)
	}
	return o
}

func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &object{vals: map[string]any{}}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			if _, dup := o.vals[k.(string)]; dup {
				return nil, fmt.Errorf("key %q twice", k)
			}
			o.set(k.(string), v)
		}
		_, err := dec.Token() // '}'
		return o, err
	case json.Delim('['):
		list := []any{}
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err := dec.Token() // ']'
		return list, err
	}
	return tok, nil
}

// writeJSON writes v as json.MarshalIndent(v, "", "  ") would, in o's key
// order and without escaping <, > and &.
func writeJSON(buf *bytes.Buffer, v any, indent string) {
	inner := indent + "  "
	switch v := v.(type) {
	case *object:
		if len(v.keys) == 0 {
			buf.WriteString("{}")
			return
		}
		buf.WriteString("{\n")
		for i, k := range v.keys {
			buf.WriteString(inner)
			writeString(buf, k)
			buf.WriteString(": ")
			writeJSON(buf, v.vals[k], inner)
			if i < len(v.keys)-1 {
				buf.WriteByte(',')
			}
			buf.WriteByte('\n')
		}
		buf.WriteString(indent + "}")
	case []any:
		if len(v) == 0 {
			buf.WriteString("[]")
			return
		}
		buf.WriteString("[\n")
		for i, e := range v {
			buf.WriteString(inner)
			writeJSON(buf, e, inner)
			if i < len(v)-1 {
				buf.WriteByte(',')
			}
			buf.WriteByte('\n')
		}
		buf.WriteString(indent + "]")
	case string:
		writeString(buf, v)
	case json.Number:
		buf.WriteString(v.String())
	case bool:
		fmt.Fprint(buf, v)
	case nil:
		buf.WriteString("null")
	default:
		panic(fmt.Sprintf("writeJSON: %T", v)) // decodeOrdered makes no other type
	}
}

func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a string always encodes
	buf.Truncate(buf.Len() - 1) // Encode's newline
}
