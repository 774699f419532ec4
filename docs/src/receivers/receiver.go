// An intake webhook receiver, verified with the Standard Webhooks library.
//
//	go mod init receiver
//	go get github.com/standard-webhooks/standard-webhooks/libraries@v0.0.1
//	INTAKE_WEBHOOK_SECRET='whsec_…' PORT=8000 go run .
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

type event struct {
	Type string `json:"type"`
	Data struct {
		ID string `json:"id"`
	} `json:"data"`
}

// handle is your code: store or queue the event and return quickly, as
// intake waits for the answer. Deliveries can repeat: deduplicate on
// Data.ID with type and timestamp.
func handle(ev event) {
	line, _ := json.Marshal(map[string]string{"type": ev.Type, "id": ev.Data.ID})
	fmt.Printf("%s\n", line) // one write: requests are handled concurrently
}

func main() {
	// The endpoint's secret for the environment received, with its whsec_.
	secret := os.Getenv("INTAKE_WEBHOOK_SECRET")
	hook, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		log.Fatalf("INTAKE_WEBHOOK_SECRET: %v", err)
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "8000"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		// The bytes as received: the signature covers them, not JSON
		// parsed and written again. intake's bodies stay far below
		// 1 MiB (payloads are at most 100 KB).
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if err := hook.Verify(body, r.Header); err != nil {
			log.Printf("refused: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var ev event
		if err := json.Unmarshal(body, &ev); err != nil {
			log.Printf("refused: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		handle(ev)
		w.WriteHeader(http.StatusNoContent) // any 2xx: received, not sent again
	})
	log.Fatal(http.ListenAndServe(":"+port, nil))
}
