package emulator

import (
	"archive/zip"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/exactonce/exactonce/e2e/template"
	"github.com/exactonce/exactonce/local/lambdaruntime"
)

// module is the Go module whose functions/ the stack's code is built from.
const module = "github.com/exactonce/exactonce"

// assets maps the S3 object keys of a cloud assembly's file assets (what a
// template's Code names) to their staged source in the assembly's folder:
// what `cdk deploy` uploads, so what Lambda runs.
type assets struct {
	dir  string
	keys map[string]string // object key → source path (a folder or a zip)
}

// loadAssets reads every *.assets.json beside the template.
func loadAssets(templatePath string) (*assets, error) {
	dir, err := filepath.Abs(filepath.Dir(templatePath))
	if err != nil {
		return nil, err
	}
	a := &assets{dir: dir, keys: map[string]string{}}
	manifests, _ := filepath.Glob(filepath.Join(dir, "*.assets.json"))
	for _, m := range manifests {
		b, err := os.ReadFile(m)
		if err != nil {
			return nil, err
		}
		var doc struct {
			Files map[string]struct {
				Source struct {
					Path      string `json:"path"`
					Packaging string `json:"packaging"`
				} `json:"source"`
				Destinations map[string]struct {
					ObjectKey string `json:"objectKey"`
				} `json:"destinations"`
			} `json:"files"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		for _, f := range doc.Files {
			for _, d := range f.Destinations {
				a.keys[d.ObjectKey] = filepath.Join(dir, f.Source.Path)
			}
		}
	}
	if len(manifests) == 0 {
		return nil, fmt.Errorf("no *.assets.json beside %s: give the suite a template in its cloud assembly (cdk.out), whose assets hold the functions' code", templatePath)
	}
	return a, nil
}

// codeDir is the unzipped code of f: its asset's folder, or a zip asset
// extracted under tmp.
func (a *assets) codeDir(f *template.Function, tmp string) (string, error) {
	if f.Code == "" {
		return "", fmt.Errorf("function %s (%s): its Code is not an S3 object of the cloud assembly (ZipFile and ImageUri are not run by the local stack)", f.Name, f.LogicalID)
	}
	src, ok := a.keys[f.Code]
	if !ok {
		return "", fmt.Errorf("function %s (%s): its Code %s is no asset of the cloud assembly in %s: cdk deploy would upload nothing for it (Lambda: NoSuchKey)", f.Name, f.LogicalID, f.Code, a.dir)
	}
	st, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("function %s: asset %s: %w", f.Name, src, err)
	}
	if st.IsDir() {
		return src, nil
	}
	out := filepath.Join(tmp, f.LogicalID)
	return out, unzip(src, out)
}

// codeOf is the main package a Go bootstrap was built from ("" when it is
// not a Go program).
func codeOf(dir string) string {
	bi, err := buildinfo.ReadFile(filepath.Join(dir, "bootstrap"))
	if err != nil {
		return ""
	}
	return bi.Path
}

// checkOwnCode fails when f runs another function's code: the bootstrap of
// its asset was built from functions/<other>.
func checkOwnCode(f *template.Function, dir string) error {
	got := codeOf(dir)
	want := module + "/functions/" + f.Name
	if got == "" || got == want || !strings.HasPrefix(got, module+"/") {
		return nil
	}
	return fmt.Errorf("function %s (%s) runs %s, whose bootstrap is %s, not %s: its Code is another function's",
		f.Name, f.LogicalID, filepath.Base(dir), strings.TrimPrefix(got, module+"/"), "functions/"+f.Name)
}

// launch is how one function runs: its definition and command.
type launch struct {
	def  lambdaruntime.Definition
	argv []string
}

// checkFunctions finds each function's code in the template's cloud
// assembly and checks what Lambda would refuse or fail to run (another
// function's code, a runtime without its handler, the wrong architecture),
// before anything starts, and returns a first model of the stack (streams
// and custom resources' answers not known yet: nothing here reads them).
// Zip assets are extracted under the returned folder (the caller removes
// it).
func checkFunctions(tpl *template.Template, names *template.Names) (string, *template.Stack, map[string]launch, error) {
	code, err := loadAssets(tpl.Path)
	if err != nil {
		return "", nil, nil, err
	}
	pre := &template.Names{Refs: names.Refs, Attrs: map[string]map[string]string{}}
	for id, a := range names.Attrs {
		pre.Attrs[id] = map[string]string{}
		for k, v := range a {
			pre.Attrs[id][k] = v
		}
		if r := tpl.Resources[id]; r.Type == "AWS::DynamoDB::Table" || r.Type == "AWS::DynamoDB::GlobalTable" {
			pre.Attrs[id]["StreamArn"] = "arn:aws:dynamodb:stream-not-created-yet"
		}
	}
	crs, err := template.CustomResources(tpl, names)
	if err != nil {
		return "", nil, nil, err
	}
	for _, c := range crs {
		for _, p := range c.Create.OutputPaths {
			pre.Attrs[c.LogicalID][p] = "not-answered-yet"
		}
	}
	stack, err := template.Model(tpl, pre)
	if err != nil {
		return "", nil, nil, err
	}
	tmp, err := os.MkdirTemp("", "exactonce-e2e-code-")
	if err != nil {
		return "", nil, nil, err
	}
	// A custom resource's provider runs at deploy time only; the local
	// stack makes its call itself. What CreateFunction would refuse of it,
	// and code the assembly does not hold, still fail.
	for _, id := range slices.Sorted(maps.Keys(stack.Providers)) {
		f := stack.Providers[id]
		if _, err := code.codeDir(f, tmp); err != nil {
			_ = os.RemoveAll(tmp)
			return "", nil, nil, fmt.Errorf("custom resource provider: %w", err)
		}
		if err := definition(f, names.Refs[id], "").Check(); err != nil {
			_ = os.RemoveAll(tmp)
			return "", nil, nil, fmt.Errorf("custom resource provider: %w", err)
		}
	}
	out := map[string]launch{}
	order := make([]string, 0, len(stack.Functions))
	for name := range stack.Functions {
		order = append(order, name)
	}
	sort.Strings(order) // the first problem, the same on every run
	for _, name := range order {
		f := stack.Functions[name]
		dir, err := code.codeDir(f, tmp)
		if err == nil {
			err = checkOwnCode(f, dir)
		}
		if err == nil && f.Tracing && !allows(f.Statements, "xray:PutTraceSegments") {
			err = fmt.Errorf("function %s (%s): TracingConfig Active, and its role may not xray:PutTraceSegments: Lambda refuses the definition at deploy", name, f.LogicalID)
		}
		var l launch
		if err == nil {
			l.def = definition(f, names.Refs[f.LogicalID], dir)
			l.argv, err = l.def.Command()
		}
		if err != nil {
			_ = os.RemoveAll(tmp)
			return "", nil, nil, err
		}
		out[name] = l
	}
	return tmp, stack, out, nil
}

// emulationGrace is how much longer than its timeout a function under
// qemu-user is given, and told as its deadline (Lambda-Runtime-Deadline-Ms):
// emulation makes the same code several times slower, which is not the
// code's doing. Told its bare timeout, an API function's first DynamoDB
// call of a stack starting on a busy machine was cancelled at 10 s and
// answered 503 (lambdaruntime's TestDeadlineHasTheGrace).
func emulationGrace(argv []string) float64 {
	if len(argv) > 1 {
		return 3
	}
	return 1
}

// definition is what Lambda is told about f.
func definition(f *template.Function, name, dir string) lambdaruntime.Definition {
	return lambdaruntime.Definition{Name: name, CodeDir: dir, Runtime: f.Runtime, Handler: f.Handler, Architectures: f.Architectures,
		MemoryMB: f.MemoryMB, TimeoutS: f.Timeout, Tracing: f.Tracing, LogFormat: f.LogFormat, Env: f.Env}
}

func unzip(src, dst string) error {
	r, err := zip.OpenReader(src)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, zf := range r.File {
		p := filepath.Join(dst, filepath.Clean("/"+zf.Name))
		if zf.FileInfo().IsDir() {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		in, err := zf.Open()
		if err != nil {
			return err
		}
		out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, zf.Mode().Perm())
		if err == nil {
			_, err = io.Copy(out, in)
			_ = out.Close()
		}
		_ = in.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
