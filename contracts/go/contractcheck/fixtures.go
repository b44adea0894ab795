package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Every context's messages register themselves, so each fixture (and any
	// reply packed in an Outcome) finds its Go type by name.
	_ "metallo/gen/pipelinecoordinationv1"
	_ "metallo/gen/sitecoordinationv1"
	_ "metallo/gen/testkitv1"
)

// checkFixtures decodes every <full message name>.<sample>.hex under dir with the
// generated Go types and checks three things per fixture: the bytes decode with no
// unknown fields, Go's deterministic encoding gives the same bytes back, and the
// decoded message equals the <same name>.json beside it. Returns the number checked.
func checkFixtures(dir string) (int, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.hex"))
	if err != nil {
		return 0, err
	}
	if len(paths) == 0 {
		return 0, fmt.Errorf("no .hex fixtures under %s", dir)
	}
	sort.Strings(paths)
	for _, path := range paths {
		if err := checkFixture(path); err != nil {
			return 0, fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
	}
	return len(paths), nil
}

func checkFixture(path string) error {
	stem := strings.TrimSuffix(filepath.Base(path), ".hex")
	cut := strings.LastIndex(stem, ".")
	if cut <= 0 {
		return fmt.Errorf("name is not <message>.<sample>.hex")
	}
	name := protoreflect.FullName(stem[:cut])
	kind, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		return fmt.Errorf("message %s is not in the generated Go code: %w", name, err)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	raw, err := hex.DecodeString(strings.TrimSpace(string(text)))
	if err != nil {
		return fmt.Errorf("not hex: %w", err)
	}
	decoded := kind.New().Interface()
	if err := proto.Unmarshal(raw, decoded); err != nil {
		return fmt.Errorf("does not decode as %s: %w", name, err)
	}
	if unknown := decoded.ProtoReflect().GetUnknown(); len(unknown) > 0 {
		return fmt.Errorf("%d bytes are fields %s does not know", len(unknown), name)
	}
	again, err := proto.MarshalOptions{Deterministic: true}.Marshal(decoded)
	if err != nil {
		return err
	}
	if !bytes.Equal(again, raw) {
		return fmt.Errorf("Go encodes the decoded %s to other bytes:\n  fixture %x\n  go      %x", name, raw, again)
	}
	jsonText, err := os.ReadFile(strings.TrimSuffix(path, ".hex") + ".json")
	if err != nil {
		return err
	}
	fromJSON := kind.New().Interface()
	if err := protojson.Unmarshal(jsonText, fromJSON); err != nil {
		return fmt.Errorf("the .json beside it does not parse as %s: %w", name, err)
	}
	if !proto.Equal(decoded, fromJSON) {
		return fmt.Errorf("the bytes and the .json beside them differ")
	}
	return nil
}
