// Checks an org.varlink.certification service with the reference Go library (Debian's
// golang-github-varlink-go-dev) beyond the sequence the reference certification client runs: the
// interface it describes parses, with the reference IDL parser, to the reference's declarations;
// GetInfo lists its interfaces; and the calls a service must refuse get errors the reference
// library types: an unknown client id, a call out of order, a wrong value, Test10 without more, a
// wrong oneway Test11 (which gets no reply: the End after it fails), an ill-typed parameter, an
// unknown method and interface. The refusals are those of the reference Python service, the
// stricter one: the reference Go service answers out-of-order calls and a wrong Test11 as if they
// were right, and InvalidParameter names "parameters" rather than the parameter.
// Usage: go_certification_check unix:/path/to/socket    (exit 0: all checks passed)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	cert "github.com/varlink/go/cmd/varlink-go-certification/orgvarlinkcertification"
	"github.com/varlink/go/varlink"
	"github.com/varlink/go/varlink/idl"
)

// The declarations of a parsed interface by name, documentation left out.
func declarations(d *idl.IDL) map[string]interface{} {
	m := map[string]interface{}{}
	for _, a := range d.Aliases {
		m["type "+a.Name] = a.Type
	}
	for _, x := range d.Methods {
		m["method "+x.Name] = [2]*idl.Type{x.In, x.Out}
	}
	for _, e := range d.Errors {
		m["error "+e.Name] = e.Type
	}
	return m
}

// The typed error the reference libraries make of an org.varlink.certification or
// org.varlink.service error, else the raw one.
func typed(err error) error {
	return dispatched(cert.Dispatch_Error(err))
}

// An error for the output: a CertificationError with its wants and got as JSON text.
func shown(err error) string {
	var ce *cert.CertificationError
	if errors.As(typed(err), &ce) {
		return fmt.Sprintf("CertificationError(wants: %s, got: %s)", ce.Wants, ce.Got)
	}
	return fmt.Sprint(typed(err))
}

// Start and the calls before `until`, as the reference client makes them: the client id, and the
// MyType of Test09 once it was called.
func runUntil(ctx context.Context, c *varlink.Connection, until string) (string, cert.MyType, error) {
	var t9 cert.MyType
	id, err := cert.Start().Call(ctx, c)
	if err != nil {
		return id, t9, err
	}
	b, err := cert.Test01().Call(ctx, c, id)
	if err != nil || until == "Test02" {
		return id, t9, err
	}
	i, err := cert.Test02().Call(ctx, c, id, b)
	if err != nil {
		return id, t9, err
	}
	f, err := cert.Test03().Call(ctx, c, id, i)
	if err != nil {
		return id, t9, err
	}
	s, err := cert.Test04().Call(ctx, c, id, f)
	if err != nil {
		return id, t9, err
	}
	b5, i5, f5, s5, err := cert.Test05().Call(ctx, c, id, s)
	if err != nil {
		return id, t9, err
	}
	o6, err := cert.Test06().Call(ctx, c, id, b5, i5, f5, s5)
	if err != nil {
		return id, t9, err
	}
	m7, err := cert.Test07().Call(ctx, c, id, o6)
	if err != nil {
		return id, t9, err
	}
	m8, err := cert.Test08().Call(ctx, c, id, m7)
	if err != nil {
		return id, t9, err
	}
	t9, err = cert.Test09().Call(ctx, c, id, m8)
	if err != nil || until == "Test10" {
		return id, t9, err
	}
	receive, err := cert.Test10().Send(ctx, c, varlink.More, id, t9)
	if err != nil {
		return id, t9, err
	}
	for {
		_, flags, err := receive(ctx)
		if err != nil || flags&varlink.Continues == 0 {
			return id, t9, err
		}
	}
}

func main() {
	ctx, cancel, c := connect("go_certification_check")
	defer cancel()
	defer c.Close()

	var vendor, product, version, url string
	var interfaces []string
	err := c.GetInfo(ctx, &vendor, &product, &version, &url, &interfaces)
	sort.Strings(interfaces)
	check(err == nil && vendor != "" && product != "" && version != "" && url != "" &&
		strings.Join(interfaces, ",") == "org.varlink.certification,org.varlink.service",
		"GetInfo: err=%v vendor=%q product=%q version=%q url=%q interfaces=%v", err, vendor, product, version, url, interfaces)

	desc, err := c.GetInterfaceDescription(ctx, "org.varlink.certification")
	served, perr := idl.New(desc)
	ref, rerr := idl.New((&cert.VarlinkInterface{}).VarlinkGetDescription())
	if err != nil || perr != nil || rerr != nil {
		check(false, "the description parses: err=%v parse=%v reference=%v", err, perr, rerr)
		os.Exit(1)
	}
	got, want := declarations(served), declarations(ref)
	for name, w := range want {
		check(reflect.DeepEqual(got[name], w), "the service declares %s as the reference does", name)
	}
	check(served.Name == ref.Name && len(got) == len(want), "interface %s, %d declarations (the reference: %s, %d)",
		served.Name, len(got), ref.Name, len(want))
	svc, err := c.GetInterfaceDescription(ctx, "org.varlink.service")
	_, perr = idl.New(svc)
	check(err == nil && perr == nil, "the org.varlink.service description parses: err=%v parse=%v", err, perr)

	var cid *cert.ClientIdError
	var ce *cert.CertificationError
	_, err = cert.Test01().Call(ctx, c, "no-such-client")
	check(errors.As(typed(err), &cid), "Test01(unknown client id) -> ClientIdError: %v", err)

	id, _, err := runUntil(ctx, c, "Test02")
	_, err2 := cert.Test03().Call(ctx, c, id, 1)
	check(err == nil && errors.As(typed(err2), &ce) && strings.Contains(string(ce.Wants), "Test02"),
		"Test03 instead of Test02 -> CertificationError: %s", shown(err2))

	id, _, err = runUntil(ctx, c, "Test02")
	_, err2 = cert.Test02().Call(ctx, c, id, false)
	check(err == nil && errors.As(typed(err2), &ce) && strings.Contains(string(ce.Got), `"bool":false`),
		"Test02(bool: false) -> CertificationError: %s", shown(err2))

	id, t9, err := runUntil(ctx, c, "Test10")
	_, err2 = cert.Test10().Call(ctx, c, id, t9)
	check(err == nil && errors.As(typed(err2), &ce), "Test10 without more -> CertificationError: %s", shown(err2))

	// A oneway Test11 gets no reply, wrong or right; the End after a wrong one tells.
	id, _, err = runUntil(ctx, c, "Test11")
	_, err2 = cert.Test11().Send(ctx, c, varlink.Oneway, id, []string{"Reply number 1"})
	ok, err3 := cert.End().Call(ctx, c, id)
	check(err == nil && err2 == nil && !ok && errors.As(typed(err3), &cid), "End after a wrong oneway Test11 -> ClientIdError: %v", err3)
	id, _, err = runUntil(ctx, c, "Test11")
	replies := []string{}
	for i := 1; i <= 10; i++ {
		replies = append(replies, fmt.Sprintf("Reply number %d", i))
	}
	_, err2 = cert.Test11().Send(ctx, c, varlink.Oneway, id, replies)
	ok, err3 = cert.End().Call(ctx, c, id)
	check(err == nil && err2 == nil && err3 == nil && ok, "End after the right oneway Test11 -> all_ok: %v %v", ok, err3)

	var ip *varlink.InvalidParameter
	var mnf *varlink.MethodNotFound
	var inf *varlink.InterfaceNotFound
	var out map[string]interface{}
	err = c.Call(ctx, "org.varlink.certification.Test01", map[string]interface{}{"client_id": 5}, &out)
	check(errors.As(typed(err), &ip) && ip.Parameter == "client_id", "Test01(client_id: 5) -> InvalidParameter: %v", typed(err))
	err = c.Call(ctx, "org.varlink.certification.Test99", nil, &out)
	check(errors.As(typed(err), &mnf), "org.varlink.certification.Test99 -> MethodNotFound: %v", typed(err))
	err = c.Call(ctx, "org.nope.Start", nil, &out)
	check(errors.As(typed(err), &inf) && inf.Interface == "org.nope", "org.nope.Start -> InterfaceNotFound: %v", typed(err))

	finish("PASS: the service's interface and refusals are the reference's")
}
