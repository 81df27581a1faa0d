// What the Go programs of tests/varlink share: each is built from its own file and this one
// (go build client.go common.go), against the reference varlink library in GOPATH mode.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/varlink/go/varlink"
)

var failures int

func check(ok bool, format string, args ...interface{}) {
	if ok {
		fmt.Printf("ok: "+format+"\n", args...)
		return
	}
	failures++
	fmt.Printf("FAILED: "+format+"\n", args...)
}

// The typed error the reference library makes of an org.varlink.service error, else the raw one.
func dispatched(err error) error {
	var ve *varlink.Error
	if errors.As(err, &ve) {
		return ve.DispatchError()
	}
	return err
}

// The connection to the address of the one argument (unix:/path), and a context that ends after
// a minute; exit 2 on a wrong command line, 1 when the connection fails.
func connect(program string) (context.Context, context.CancelFunc, *varlink.Connection) {
	if len(os.Args) != 2 {
		fmt.Fprintf(os.Stderr, "usage: %s unix:/path/to/socket\n", program)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	c, err := varlink.NewConnection(ctx, os.Args[1])
	if err != nil {
		fmt.Println("FAILED: connect:", err)
		os.Exit(1)
	}
	return ctx, cancel, c
}

// Exit 1 when a check failed, else print `pass`.
func finish(pass string) {
	if failures > 0 {
		fmt.Printf("%d check(s) failed\n", failures)
		os.Exit(1)
	}
	fmt.Println(pass)
}
