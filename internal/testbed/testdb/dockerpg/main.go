// Command dockerpg is the Docker path of Hopper's test bed
// (internal/testbed/testdb): it starts a PostgreSQL container with dockertest,
// prints a connection string on stdout once the server answers, and purges
// the container when its standard input closes (the test binary that ran it
// ended, however it ended) or on SIGINT or SIGTERM.
//
// It is a module of its own so that dockertest and its dependencies stay
// out of Hopper's module graph, and out of the graphs of Hopper's users.
// It imports nothing of Hopper's: testdb runs it with `go run` and reads
// one line.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
)

// Image is the pinned PostgreSQL image.
const (
	repository = "postgres"
	tag        = "17.2-alpine"
)

// expireAfter bounds a container's life should this process die without
// purging it (SIGKILL): Docker stops it then, and AutoRemove removes it.
const expireAfter = 2 * time.Hour

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "dockerpg: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	if err := pool.Client.Ping(); err != nil {
		return fmt.Errorf("docker engine does not answer: %w", err)
	}
	pool.MaxWait = 2 * time.Minute

	// Stop on a signal, or when stdin closes, from here on: a purge must
	// follow every start. A test binary that ended early closed stdout
	// too: printing to it must fail, not kill this process unpurged.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()

	resource, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: repository,
		Tag:        tag,
		Env: []string{
			"POSTGRES_HOST_AUTH_METHOD=trust",
			"POSTGRES_USER=hopper",
			"POSTGRES_DB=test",
		},
		// A test server: durability off, room for parallel test packages.
		Cmd:    []string{"postgres", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=500"},
		Labels: map[string]string{"dev.hopperq.hopper.testbed": "1"},
	}, func(hc *docker.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return fmt.Errorf("start %s:%s: %w", repository, tag, err)
	}
	defer func() {
		if err := pool.Purge(resource); err != nil {
			fmt.Fprintf(os.Stderr, "dockerpg: purge %s: %v\n", resource.Container.ID, err)
		}
	}()
	if err := resource.Expire(uint(expireAfter / time.Second)); err != nil {
		return fmt.Errorf("set expiry: %w", err)
	}

	dsn := (&url.URL{
		Scheme:   "postgres",
		User:     url.User("hopper"),
		Host:     hostPort(resource),
		Path:     "/test",
		RawQuery: "sslmode=disable",
	}).String()

	ready := make(chan error, 1)
	go func() {
		ready <- pool.Retry(func() error { return ping(dsn) })
	}()
	select {
	case err := <-ready:
		if err != nil {
			return fmt.Errorf("postgres in container %s did not answer within %v: %w", resource.Container.Name, pool.MaxWait, err)
		}
	case s := <-signals:
		return fmt.Errorf("%v before postgres answered", s)
	case <-eof:
		return errors.New("stdin closed before postgres answered")
	}

	if _, err := fmt.Println(dsn); err != nil {
		return fmt.Errorf("print the connection string: %w", err)
	}

	select {
	case <-eof:
	case <-signals:
	}
	return nil
}

// hostPort is where the container's PostgreSQL port is published: on the
// engine's host when DOCKER_HOST names a remote one, else on this machine.
func hostPort(r *dockertest.Resource) string {
	hp := r.GetHostPort("5432/tcp")
	u, err := url.Parse(os.Getenv("DOCKER_HOST"))
	if err != nil || u.Scheme != "tcp" || u.Hostname() == "" {
		return hp
	}
	_, port, err := net.SplitHostPort(hp)
	if err != nil {
		return hp
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func ping(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := conn.Ping(ctx); err != nil {
		return err
	}
	var ok int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&ok); err != nil || ok != 1 {
		return errors.Join(errors.New("SELECT 1 failed"), err)
	}
	return nil
}
