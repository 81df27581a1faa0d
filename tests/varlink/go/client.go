// A varlink client built on the reference Go implementation (Debian's golang-github-varlink-go-dev)
// calling every method of io.haltpolld, and org.varlink.service's, on a running haltpolld.
// The method list comes from the daemon's own interface description, parsed by the reference IDL
// parser: a method this client does not exercise fails the run.
// Usage: go_client unix:/path/to/io.haltpolld    (exit 0: all checks passed)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sort"
	"strings"

	"github.com/varlink/go/varlink"
	"github.com/varlink/go/varlink/idl"
)

func errorName(err error) string {
	var ve *varlink.Error
	if errors.As(err, &ve) {
		return ve.Name
	}
	return ""
}

type object = map[string]interface{}

func call(ctx context.Context, c *varlink.Connection, method string, in interface{}) (object, error) {
	var out object
	err := c.Call(ctx, method, in, &out)
	return out, err
}

func main() {
	ctx, cancel, c := connect("go_client")
	defer cancel()
	defer c.Close()

	// org.varlink.service: GetInfo sends "parameters": null.
	var vendor, product, version, url string
	var interfaces []string
	err := c.GetInfo(ctx, &vendor, &product, &version, &url, &interfaces)
	check(err == nil, "GetInfo: err=%v vendor=%q product=%q version=%q", err, vendor, product, version)
	sort.Strings(interfaces)
	check(strings.Join(interfaces, ",") == "io.haltpolld,org.varlink.service", "GetInfo interfaces %v", interfaces)

	desc, err := c.GetInterfaceDescription(ctx, "io.haltpolld")
	check(err == nil && strings.Contains(desc, "interface io.haltpolld"), "GetInterfaceDescription(io.haltpolld): err=%v", err)
	parsed, err := idl.New(desc)
	if err != nil {
		check(false, "the reference IDL parser refuses the description: %v", err)
		os.Exit(1)
	}
	check(parsed.Name == "io.haltpolld", "IDL names the interface %q", parsed.Name)
	svcDesc, err := c.GetInterfaceDescription(ctx, "org.varlink.service")
	_, perr := idl.New(svcDesc)
	check(err == nil && perr == nil, "org.varlink.service description parses: err=%v parse=%v", err, perr)

	// The service interface's own errors, typed by the reference library.
	_, err = c.GetInterfaceDescription(ctx, "io.none")
	var inf *varlink.InterfaceNotFound
	check(errors.As(dispatched(err), &inf) && inf.Interface == "io.none", "GetInterfaceDescription(io.none) -> InterfaceNotFound: %v", err)
	_, err = call(ctx, c, "io.haltpolld.NoSuchMethod", nil)
	var mnf *varlink.MethodNotFound
	check(errors.As(dispatched(err), &mnf) && mnf.Method == "io.haltpolld.NoSuchMethod", "io.haltpolld.NoSuchMethod -> MethodNotFound: %v", err)
	_, err = call(ctx, c, "org.varlink.service.NoSuchMethod", nil)
	check(errors.As(dispatched(err), &mnf), "org.varlink.service.NoSuchMethod -> MethodNotFound: %v", err)
	_, err = call(ctx, c, "io.none.GetStatus", nil)
	check(errors.As(dispatched(err), &inf) && inf.Interface == "io.none", "io.none.GetStatus -> InterfaceNotFound: %v", err)
	_, err = call(ctx, c, "org.varlink.service.GetInterfaceDescription", object{"interface": 5})
	var ip *varlink.InvalidParameter
	check(errors.As(dispatched(err), &ip) && ip.Parameter == "interface", "GetInterfaceDescription(interface: 5) -> InvalidParameter: %v", err)
	_, err = call(ctx, c, "io.haltpolld.GetStatus", object{"colour": 1})
	check(errors.As(dispatched(err), &ip) && ip.Parameter == "colour", "GetStatus(colour: 1) -> InvalidParameter: %v", err)

	// Every io.haltpolld method.
	done := map[string]bool{}
	out, err := call(ctx, c, "io.haltpolld.GetStatus", nil)
	check(err == nil && out["version"] == version && out["mode"] != nil, "GetStatus: err=%v mode=%v", err, out["mode"])
	done["GetStatus"] = true

	out, err = call(ctx, c, "io.haltpolld.GetStats", object{"histogram": true})
	check(err == nil && out["mode"] != nil, "GetStats: err=%v", err)
	done["GetStats"] = true

	recv, err := c.Send(ctx, "io.haltpolld.Watch", object{"interval_ms": 100, "count": 3}, varlink.More)
	replies := 0
	for err == nil {
		var w object
		var flags uint64
		flags, err = recv(ctx, &w)
		if err != nil {
			break
		}
		replies++
		if flags&varlink.Continues == 0 {
			break
		}
	}
	check(err == nil && replies == 3, "Watch(count: 3) with more: %d replies, err=%v", replies, err)
	done["Watch"] = true

	out, err = call(ctx, c, "io.haltpolld.GetConfig", nil)
	cfg, _ := out["config"].(object)
	check(err == nil && cfg != nil, "GetConfig: err=%v", err)
	done["GetConfig"] = true

	out, err = call(ctx, c, "io.haltpolld.SetConfig", object{"config": object{"tuner": object{"interval_ms": 700}}})
	got, _ := json.Marshal(out["config"])
	check(err == nil && strings.Contains(string(got), `"interval_ms":700`), "SetConfig(tuner.interval_ms 700): err=%v", err)
	done["SetConfig"] = true
	_, err = call(ctx, c, "io.haltpolld.SetConfig", object{"config": object{"tuner": object{"interval_ms": "soon"}}})
	check(errorName(err) == "io.haltpolld.ConfigRefused", "SetConfig(interval_ms: \"soon\") -> ConfigRefused: %v", err)

	out, err = call(ctx, c, "io.haltpolld.Reload", nil)
	check(err == nil && out["file"] != nil, "Reload: err=%v file=%v", err, out["file"])
	done["Reload"] = true

	_, err = call(ctx, c, "io.haltpolld.ResetStats", nil)
	check(err == nil, "ResetStats: err=%v", err)
	done["ResetStats"] = true

	// No other writer on this tree: nothing to take over, said in the reply.
	out, err = call(ctx, c, "io.haltpolld.TakeOver", nil)
	took, _ := out["took_over"].(bool)
	msg, _ := out["message"].(string)
	check(err == nil && !took && strings.Contains(msg, "no other writer"), "TakeOver: err=%v took_over=%v message=%q", err, took, msg)
	done["TakeOver"] = true

	out, err = call(ctx, c, "io.haltpolld.GetDecisions", object{"limit": 5})
	_, isList := out["decisions"].([]interface{})
	check(err == nil && isList, "GetDecisions(limit: 5): err=%v", err)
	done["GetDecisions"] = true

	out, err = call(ctx, c, "io.haltpolld.GetMetrics", nil)
	text, _ := out["text"].(string)
	check(err == nil && strings.Contains(text, "haltpoll_info"), "GetMetrics: err=%v, %d bytes", err, len(text))
	done["GetMetrics"] = true

	for _, m := range parsed.Methods {
		check(done[m.Name], "the interface's method %s was called", m.Name)
	}
	check(len(parsed.Methods) == len(done), "the interface declares %d methods, %d were called", len(parsed.Methods), len(done))

	finish("PASS: the reference Go client called every method")
}
