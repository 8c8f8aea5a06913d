package servedby_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"fusion/router/servedby"
)

func TestMiddleware(t *testing.T) {
	tests := map[string]struct {
		report  []string
		replace [2]string
		flush   bool
		want    string
	}{
		"replaced":      {[]string{"a", "b", "a"}, [2]string{"a", "c"}, false, "c,b,a"},
		"none":          {nil, [2]string{}, false, ""},
		"one":           {[]string{"a"}, [2]string{}, false, "a"},
		"several":       {[]string{"a", "b", "a", ""}, [2]string{}, false, "a,b"},
		"flushed first": {[]string{"b"}, [2]string{}, true, "b"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := servedby.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, n := range tc.report {
					servedby.Report(r.Context(), n)
				}
				if tc.replace[0] != "" {
					servedby.Replace(r.Context(), tc.replace[0], tc.replace[1])
				}
				if tc.flush {
					w.Header().Set("Content-Type", "text/event-stream")
					if err := http.NewResponseController(w).Flush(); err != nil {
						t.Errorf("flush through the wrapper: %v", err)
					}
				}
				w.Write([]byte("ok"))
				servedby.Report(r.Context(), "late") // after the header: not sent
			}))
			rec := httptest.NewRecorder() // Result has the headers as sent
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			if got := rec.Result().Header.Get(servedby.Header); got != tc.want {
				t.Errorf("header %q, want %q", got, tc.want)
			}
		})
	}
}
