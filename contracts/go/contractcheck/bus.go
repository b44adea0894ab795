package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	commonv1 "metallo/gen/commonv1"
)

// The wire envelope of docs/messaging.md: what every command and query carries.
const (
	contentType     = "application/x-protobuf"
	contractVersion = "v1"
	// memberTokenHeader carries a member's access token ("Bearer <token>"); never in the body.
	memberTokenHeader = "authorization"
)

// Rejected is a definite refusal from the owner, with its stable code.
type Rejected struct {
	Code    string
	Message string
}

func (r *Rejected) Error() string { return r.Code + ": " + r.Message }

// Bus sends typed commands and queries to metallo.commands and reads the replies
// from this process's own exclusive reply queue, matched by correlation_id.
type Bus struct {
	conn        *amqp.Connection
	ch          *amqp.Channel
	exchange    string
	replyQueue  string
	replies     <-chan amqp.Delivery
	confirms    chan amqp.Confirmation
	returns     chan amqp.Return
	memberToken string
}

// Dial connects to url (credentials inside it), declares the reply queue
// <prefix>metallo.reply.<random> and puts the channel in confirm mode.
// memberToken, when not empty, is sent as "authorization: Bearer <token>".
func Dial(url, prefix, memberToken string) (*Bus, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "metallo-go-contractcheck"}})
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ: %w", redact(err, url))
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, err
	}
	name := prefix + "metallo.reply." + randomHex(16)
	if _, err := ch.QueueDeclare(name, false, true, true, false, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("declare reply queue: %w", err)
	}
	replies, err := ch.Consume(name, "", true, true, false, false, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("consume reply queue: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, err
	}
	return &Bus{
		conn: conn, ch: ch, exchange: prefix + "metallo.commands", replyQueue: name, replies: replies,
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, 1)),
		returns:  ch.NotifyReturn(make(chan amqp.Return, 1)), memberToken: memberToken,
	}, nil
}

// Close closes the channel and the connection (the reply queue goes with them).
func (b *Bus) Close() { b.conn.Close() }

// RoutingKey is <owner>.command.<Name> or <owner>.query.<Name>: a query is a
// message whose field 1 is metallo.common.v1.QueryMetadata.
func RoutingKey(m proto.Message) (string, error) {
	desc := m.ProtoReflect().Descriptor()
	parts := strings.Split(string(desc.FullName()), ".")
	if len(parts) != 4 || parts[0] != "metallo" {
		return "", fmt.Errorf("%s is not metallo.<context>.<version>.<Name>", desc.FullName())
	}
	kind := "command"
	if f := desc.Fields().ByNumber(1); f != nil && f.Kind() == protoreflect.MessageKind &&
		f.Message().FullName() == "metallo.common.v1.QueryMetadata" {
		kind = "query"
	}
	return parts[1] + "." + kind + "." + parts[3], nil
}

// Request publishes body (the deterministic encoding of m) and waits up to
// timeout for the Outcome. The caller keeps body to replay the exact bytes.
func (b *Bus) Request(m proto.Message, body []byte, timeout time.Duration) (*commonv1.Outcome, error) {
	key, err := RoutingKey(m)
	if err != nil {
		return nil, err
	}
	correlation := randomHex(16)
	headers := amqp.Table{"contract-version": contractVersion}
	if b.memberToken != "" {
		headers[memberTokenHeader] = "Bearer " + b.memberToken
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = b.ch.PublishWithContext(ctx, b.exchange, key, true, false, amqp.Publishing{
		ContentType: contentType, Type: string(m.ProtoReflect().Descriptor().FullName()),
		MessageId: randomUUID(), CorrelationId: correlation, ReplyTo: b.replyQueue,
		Headers: headers, DeliveryMode: amqp.Persistent, Body: body,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: publish: %w", key, err)
	}
	// A mandatory message with no queue comes back (basic.return) before its ack.
	select {
	case r := <-b.returns:
		<-b.confirms
		return nil, fmt.Errorf("%s: no queue for its owner (%s): is the service running?", key, r.ReplyText)
	case c := <-b.confirms:
		if !c.Ack {
			return nil, fmt.Errorf("%s: the broker refused the message", key)
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: the broker did not confirm within %s", key, timeout)
	}
	for {
		select {
		case d, ok := <-b.replies:
			if !ok {
				return nil, fmt.Errorf("%s: the reply queue closed", key)
			}
			if d.CorrelationId != correlation {
				continue // a late reply to an earlier request
			}
			if d.ContentType != contentType || d.Type != "metallo.common.v1.Outcome" {
				return nil, fmt.Errorf("%s: reply is %q (%s), not a metallo.common.v1.Outcome", key, d.Type, d.ContentType)
			}
			outcome := &commonv1.Outcome{}
			if err := proto.Unmarshal(d.Body, outcome); err != nil {
				return nil, fmt.Errorf("%s: reply does not decode: %w", key, err)
			}
			return outcome, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: no reply within %s; the outcome is uncertain (retrying with the same command_id is safe)", key, timeout)
		}
	}
}

// Call sends m and unpacks an accepted reply into reply; a rejection is *Rejected.
func (b *Bus) Call(m, reply proto.Message, timeout time.Duration) error {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return err
	}
	outcome, err := b.Request(m, body, timeout)
	if err != nil {
		return err
	}
	return Unpack(outcome, reply)
}

// Unpack puts an accepted Outcome's reply into reply (its type must match) or
// returns the rejection as *Rejected.
func Unpack(outcome *commonv1.Outcome, reply proto.Message) error {
	if r := outcome.GetRejected(); r != nil {
		return &Rejected{Code: r.GetCode(), Message: r.GetMessage()}
	}
	if outcome.GetAccepted() == nil {
		return fmt.Errorf("the Outcome is neither accepted nor rejected")
	}
	return outcome.GetAccepted().UnmarshalTo(reply)
}

func randomHex(n int) string {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%x", buf)
}

func randomUUID() string {
	buf := make([]byte, 16)
	if _, err := rand.Read(buf); err != nil {
		panic(err)
	}
	buf[6] = buf[6]&0x0f | 0x40
	buf[8] = buf[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", buf[0:4], buf[4:6], buf[6:8], buf[8:10], buf[10:])
}

// redact keeps the URL's password out of an error text.
func redact(err error, url string) error {
	if u, perr := amqp.ParseURI(url); perr == nil && u.Password != "" {
		return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), u.Password, "***"))
	}
	return err
}
