package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/hopperq/hopper/internal/testbed/citusbed"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	f, err := citusbed.Start(ctx, citusbed.Options{Log: os.Stderr})
	if err != nil {
		panic(err)
	}
	defer f.Stop()
	fmt.Println(f.URL())
	for _, w := range f.Workers {
		fmt.Println(w.URL())
	}
	os.WriteFile("/work/citus-urls", []byte(fmt.Sprintln(f.URL(), f.Workers[0].URL(), f.Workers[1].URL())), 0o644)
	<-ctx.Done()
}
