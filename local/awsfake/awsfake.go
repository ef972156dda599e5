// Package awsfake serves the two AWS APIs the functions call that have no
// local emulator here: SQS SendMessage (the on-failure queue) and Secrets
// Manager GetSecretValue (the server secret), in the AWS JSON protocol the
// SDK speaks, so the functions' real SDK clients reach them through
// AWS_ENDPOINT_URL_SQS and AWS_ENDPOINT_URL_SECRETS_MANAGER.
package awsfake

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Server is the fake. The zero value is not usable; call New.
type Server struct {
	mu      sync.Mutex
	queues  map[string][]string // queue name → message bodies, oldest first
	secrets map[string]string   // secret ARN → value
	params  map[string]string   // SSM parameter name → value
	srv     *http.Server
	URL     string
}

// New starts the fake on a free loopback port.
func New() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{queues: map[string][]string{}, secrets: map[string]string{}, URL: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the fake.
func (s *Server) Close() error { return s.srv.Close() }

// AddQueue creates an empty queue.
func (s *Server) AddQueue(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.queues[name]; !ok {
		s.queues[name] = []string{}
	}
}

// Messages returns a queue's message bodies, oldest first.
func (s *Server) Messages(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.queues[name]...)
}

// PutParameter sets an SSM parameter's value.
func (s *Server) PutParameter(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.params == nil {
		s.params = map[string]string{}
	}
	s.params[name] = value
}

// PutSecret sets a secret's value.
func (s *Server) PutSecret(arn, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets[arn] = value
}

// secret finds a secret by its ARN or its name.
func (s *Server) secret(id string) (arn, value string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.secrets[id]; ok {
		return id, v, true
	}
	for arn, v := range s.secrets {
		if SecretName(arn) == id {
			return arn, v, true
		}
	}
	return "", "", false
}

// SecretName is the name of the secret whose ARN is arn: its resource after
// "secret:", less the hyphen and six random characters Secrets Manager adds.
func SecretName(arn string) string {
	_, name, _ := strings.Cut(arn, ":secret:")
	if len(name) > 7 && name[len(name)-7] == '-' {
		return name[:len(name)-7]
	}
	return name
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in map[string]any
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
		fail(w, http.StatusBadRequest, "ValidationException", "the body is not JSON")
		return
	}
	str := func(k string) string { v, _ := in[k].(string); return v }
	switch r.Header.Get("X-Amz-Target") {
	case "AmazonSQS.SendMessage":
		name := queueName(str("QueueUrl"))
		s.mu.Lock()
		_, ok := s.queues[name]
		if ok {
			s.queues[name] = append(s.queues[name], str("MessageBody"))
		}
		s.mu.Unlock()
		if !ok {
			fail(w, http.StatusBadRequest, "com.amazonaws.sqs#QueueDoesNotExist", "The specified queue does not exist.")
			return
		}
		sum := md5.Sum([]byte(str("MessageBody"))) // the SDK checks it
		reply(w, map[string]string{"MessageId": newID(), "MD5OfMessageBody": hex.EncodeToString(sum[:])})
	case "AmazonSQS.GetQueueUrl":
		reply(w, map[string]string{"QueueUrl": "https://sqs.local/000000000000/" + str("QueueName")})
	case "AmazonSQS.GetQueueAttributes":
		name := queueName(str("QueueUrl"))
		s.mu.Lock()
		n := len(s.queues[name])
		s.mu.Unlock()
		reply(w, map[string]any{"Attributes": map[string]string{"ApproximateNumberOfMessages": itoa(n)}})
	case "secretsmanager.GetSecretValue":
		arn, v, ok := s.secret(str("SecretId"))
		if !ok {
			fail(w, http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
			return
		}
		reply(w, map[string]any{"ARN": arn, "Name": SecretName(arn), "SecretString": v,
			"VersionId": "e2e", "VersionStages": []string{"AWSCURRENT"}, "CreatedDate": float64(time.Now().Unix())})
	case "AmazonSSM.GetParameter":
		name := str("Name")
		s.mu.Lock()
		v, ok := s.params[name]
		s.mu.Unlock()
		if !ok {
			fail(w, http.StatusBadRequest, "ParameterNotFound", "")
			return
		}
		reply(w, map[string]any{"Parameter": map[string]any{"Name": name, "Type": "String", "Value": v, "Version": 1,
			"ARN": "arn:aws:ssm:us-east-1:000000000000:parameter/" + strings.TrimPrefix(name, "/"), "DataType": "text"}})
	default:
		fail(w, http.StatusBadRequest, "UnknownOperationException", "the fake serves SQS SendMessage, Secrets Manager GetSecretValue and SSM GetParameter")
	}
}

func queueName(url string) string { return url[strings.LastIndex(url, "/")+1:] }

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
