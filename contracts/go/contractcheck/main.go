// Command contractcheck proves Metallo's client contract from Go, as the Go API
// uses it: the committed .proto files compiled by protoc-gen-go, the byte
// fixtures decoded, and typed commands and queries over RabbitMQ.
//
//	contractcheck -fixtures contracts/fixtures                       (fixtures only)
//	contractcheck -fixtures contracts/fixtures -repository-url URL -action NAME
//
// Inputs from the environment (never from the command line, so no secret shows
// in a process list): METALLO_AMQP_URL (amqp://user:password@host:port/vhost),
// METALLO_AMQP_USER and METALLO_AMQP_PASSWORD (replace the URL's credentials),
// METALLO_MEMBER_TOKEN (optional; sent as the "authorization: Bearer <token>"
// header of every request), METALLO_TOPOLOGY_PREFIX.
//
// Against the stack it sends PrepareAction, LaunchRun and GetRun (until the Run
// is terminal) with its own reply queue, replays the LaunchRun's exact bytes
// (same command_id, same bytes: the same Outcome) and sends the same command_id
// with another input (an idempotency-conflict rejection). It prints one JSON
// line of what it saw and exits 1 on the first check that fails.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	commonv1 "metallo/gen/commonv1"
	executioncorev1 "metallo/gen/executioncorev1"
	workloadportfoliov1 "metallo/gen/workloadportfoliov1"
)

type options struct {
	fixtures, repositoryURL, branch, action, member, project string
	timeout, runTimeout                                      time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.fixtures, "fixtures", "contracts/fixtures", "directory of <message>.<sample>.hex fixtures")
	flag.StringVar(&o.repositoryURL, "repository-url", "", "repository to prepare an action of (empty: fixtures only)")
	flag.StringVar(&o.branch, "branch", "main", "branch of the repository")
	flag.StringVar(&o.action, "action", "", "action in the repository's actions.yaml")
	flag.StringVar(&o.member, "member", "m-alice", "acting member id (metadata.acting_member)")
	flag.StringVar(&o.project, "project", "demo", "Project id (metadata.project)")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Second, "time for one reply")
	flag.DurationVar(&o.runTimeout, "run-timeout", 180*time.Second, "time for the Run to end")
	flag.Parse()
	report, err := run(o)
	line, _ := json.Marshal(report)
	fmt.Println(string(line))
	if err != nil {
		fmt.Fprintln(os.Stderr, "contractcheck:", err)
		os.Exit(1)
	}
}

func run(o options) (map[string]any, error) {
	report := map[string]any{"client": "go", "ok": false}
	count, err := checkFixtures(o.fixtures)
	if err != nil {
		return report, fmt.Errorf("fixtures: %w", err)
	}
	report["fixtures_decoded"] = count
	if o.repositoryURL == "" {
		report["ok"] = true
		return report, nil
	}
	if o.action == "" {
		return report, errors.New("-action is required with -repository-url")
	}
	amqpURL, err := brokerURL()
	if err != nil {
		return report, err
	}
	bus, err := Dial(amqpURL, os.Getenv("METALLO_TOPOLOGY_PREFIX"), os.Getenv("METALLO_MEMBER_TOKEN"))
	if err != nil {
		return report, err
	}
	defer bus.Close()
	if err := contract(bus, o, report); err != nil {
		return report, err
	}
	report["ok"] = true
	return report, nil
}

// brokerURL is METALLO_AMQP_URL with METALLO_AMQP_USER/PASSWORD put in when set.
func brokerURL() (string, error) {
	raw := os.Getenv("METALLO_AMQP_URL")
	if raw == "" {
		raw = "amqp://127.0.0.1:5672/"
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		return "", errors.New("METALLO_AMQP_URL is not an amqp:// or amqps:// URL")
	}
	if user := os.Getenv("METALLO_AMQP_USER"); user != "" {
		u.User = url.UserPassword(user, os.Getenv("METALLO_AMQP_PASSWORD"))
	}
	return u.String(), nil
}

func metadata(o options) *commonv1.CommandMetadata {
	return &commonv1.CommandMetadata{CommandId: randomUUID(), ActingMember: o.member, Project: o.project}
}

func contract(bus *Bus, o options, report map[string]any) error {
	prepared := &workloadportfoliov1.PrepareActionReply{}
	err := bus.Call(&workloadportfoliov1.PrepareAction{
		Metadata: metadata(o), RepositoryUrl: o.repositoryURL, Branch: o.branch, Action: o.action,
	}, prepared, o.timeout)
	if err != nil {
		return fmt.Errorf("PrepareAction: %w", err)
	}
	if prepared.GetWorkloadId() == "" || prepared.GetRevision() < 1 || prepared.GetAction() != o.action ||
		len(prepared.GetCommit()) != 40 {
		return fmt.Errorf("PrepareAction: unexpected reply %v", prepared)
	}
	report["workload_id"], report["revision"] = prepared.GetWorkloadId(), prepared.GetRevision()

	launch := &executioncorev1.LaunchRun{
		Metadata: metadata(o), WorkloadId: prepared.GetWorkloadId(), Revision: prepared.GetRevision(),
		Labels: map[string]string{"client": "go-contractcheck"},
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(launch)
	if err != nil {
		return err
	}
	first, err := bus.Request(launch, body, o.timeout)
	if err != nil {
		return fmt.Errorf("LaunchRun: %w", err)
	}
	launched := &executioncorev1.LaunchRunReply{}
	if err := Unpack(first, launched); err != nil {
		return fmt.Errorf("LaunchRun: %w", err)
	}
	if launched.GetRunId() == "" || launched.GetPhase() != "accepted" {
		return fmt.Errorf("LaunchRun: unexpected reply %v", launched)
	}
	report["run_id"] = launched.GetRunId()

	replayed, err := bus.Request(launch, body, o.timeout)
	if err != nil {
		return fmt.Errorf("LaunchRun replay: %w", err)
	}
	if !proto.Equal(first, replayed) {
		return fmt.Errorf("LaunchRun replay: the same command_id and bytes gave another outcome: %v", replayed)
	}
	report["replay_same_outcome"] = true

	conflicting := proto.Clone(launch).(*executioncorev1.LaunchRun)
	conflicting.Labels["client"] = "go-contractcheck-changed"
	var rejected *Rejected
	err = bus.Call(conflicting, &executioncorev1.LaunchRunReply{}, o.timeout)
	if !errors.As(err, &rejected) || rejected.Code != "idempotency-conflict" {
		return fmt.Errorf("LaunchRun with a reused command_id and another input: want idempotency-conflict, got %v", err)
	}
	report["conflict_code"] = rejected.Code

	run, err := awaitEnd(bus, o, launched.GetRunId())
	if err != nil {
		return err
	}
	report["phase"], report["outcome"] = run.GetPhase(), run.GetOutcome()
	if run.GetRunId() != launched.GetRunId() || run.GetProject() != o.project ||
		run.GetWorkloadId() != prepared.GetWorkloadId() || run.GetLabels()["client"] != "go-contractcheck" {
		return fmt.Errorf("GetRun: the Run does not match its launch: %v", run)
	}
	if run.GetOutcome() != "succeeded" {
		return fmt.Errorf("GetRun: the Run ended %q (%s)", run.GetOutcome(), run.GetReasonCode())
	}
	return nil
}

// awaitEnd reads the Run with GetRun once a second until its phase is terminal.
func awaitEnd(bus *Bus, o options, runID string) (*executioncorev1.Run, error) {
	deadline := time.Now().Add(o.runTimeout)
	for {
		run := &executioncorev1.Run{}
		err := bus.Call(&executioncorev1.GetRun{
			Metadata: &commonv1.QueryMetadata{ActingMember: o.member, Project: o.project}, RunId: runID,
		}, run, o.timeout)
		if err != nil {
			return nil, fmt.Errorf("GetRun: %w", err)
		}
		if run.GetPhase() == "terminal" {
			return run, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("GetRun: Run %s still %s after %s", runID, run.GetPhase(), o.runTimeout)
		}
		time.Sleep(time.Second)
	}
}
