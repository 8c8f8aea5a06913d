package mcp

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"fusion/mcp/host"
)

func TestMapContent(t *testing.T) {
	size := int64(42)
	for _, tc := range []struct {
		name string
		in   sdk.Content
		want string
	}{
		{"text", &sdk.TextContent{Text: "hi"}, `{"type":"text","text":"hi"}`},
		{"empty text keeps its field", &sdk.TextContent{}, `{"type":"text","text":""}`},
		{"image", &sdk.ImageContent{Data: []byte{0x89, 'P', 'N', 'G'}, MIMEType: "image/png"}, `{"type":"image","data":"iVBORw==","mime_type":"image/png"}`},
		{"audio", &sdk.AudioContent{Data: []byte("RIFF"), MIMEType: "audio/wav"}, `{"type":"audio","data":"UklGRg==","mime_type":"audio/wav"}`},
		{"resource link", &sdk.ResourceLink{URI: "file:///a.txt", Name: "a.txt", Title: "A", Description: "d", MIMEType: "text/plain", Size: &size},
			`{"type":"resource_link","mime_type":"text/plain","uri":"file:///a.txt","name":"a.txt","title":"A","description":"d","size":42}`},
		{"embedded text", &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "demo://1", MIMEType: "text/plain", Text: "body"}},
			`{"type":"resource","resource":{"uri":"demo://1","mime_type":"text/plain","text":"body"}}`},
		{"embedded blob", &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "demo://2", Blob: []byte{1, 2, 3}}},
			`{"type":"resource","resource":{"uri":"demo://2","blob":"AQID"}}`},
		{"annotations", &sdk.TextContent{Text: "x", Annotations: &sdk.Annotations{Priority: 0.5}}, `{"type":"text","text":"x","annotations":{"priority":0.5}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(MapContent([]sdk.Content{tc.in})[0])
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestCallErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		err   error
		code  int
		param string
	}{
		{&host.ArgumentError{Path: "arguments.x", Msg: "missing"}, 400, "arguments.x"},
		{host.ErrToolNotFound, 404, "tool_name"},
		{host.ErrNotReady, 503, ""},
		{&host.CallError{Server: "s", Tool: "t", Timeout: true, Err: errors.New("deadline")}, 504, ""},
		{&host.CallError{Server: "s", Tool: "t", Err: errors.New("EOF")}, 502, ""},
	} {
		e := callError("t", tc.err)
		if e.Status != tc.code || e.Param != tc.param || e.Message == "" {
			t.Errorf("%v: %+v, want %d %q", tc.err, e, tc.code, tc.param)
		}
	}
}

func TestNoHost(t *testing.T) {
	r := chi.NewRouter()
	New(nil).Mount(r)
	for _, tc := range []struct{ method, path, body, want string }{
		{"GET", "/v1/mcp/servers", "", `{"servers":[]}`},
		{"GET", "/v1/mcp/tools", "", `{"tools":[]}`},
		{"POST", "/v1/mcp/execute", `{"tool_name":"x"}`, `"code":"tool_not_found"`},
	} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
		if !strings.Contains(w.Body.String(), tc.want) || (tc.method == "GET" && w.Code != http.StatusOK) {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, w.Code, w.Body)
		}
	}
}
