package placement

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"

	"github.com/moerun/moerun/gguf"
)

// palette colours devices in pictures: the CPU grey-blue, GPUs in turn.
var palette = []string{"#4e9a06", "#f57900", "#3465a4", "#c4a000", "#75507b", "#cc0000", "#06989a", "#8f5902"}

const cpuColour = "#9aa7b8"

func (p *Plan) colours() map[string]string {
	c := map[string]string{"CPU": cpuColour}
	i := 0
	for _, d := range p.Devices {
		if d.Device.Name != "CPU" {
			c[d.Device.Name] = palette[i%len(palette)]
			i++
		}
	}
	return c
}

// SVG geometry.
const (
	svgRow     = 14
	svgLabelW  = 90
	svgCellW   = 78
	svgBarW    = 220 // the longest layer's bytes bar
	svgBarText = 200 // room for its label
)

// WriteSVG draws the layer map: one row per layer, one column per tensor class plus the KV
// cache, each cell coloured by the device holding it (split cells show every device), with
// the layer's bytes per device as a bar, under a legend with each device's memory.
func (p *Plan) WriteSVG(w io.Writer) error {
	ew := &errWriter{w: w}
	col := p.colours()
	var shown []DeviceUse
	for _, d := range p.Devices {
		if d.InModel || d.Total > 0 {
			shown = append(shown, d)
		}
	}
	cols := len(mapClasses) + 2
	top := 48 + 2*16*len(shown) + 20 // legend and capacity bars above the map
	width := svgLabelW + cols*svgCellW + 10 + svgBarW + svgBarText
	height := top + (len(p.Layers)+1)*svgRow + 20
	fmt.Fprintf(ew, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(ew, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(ew, `<text x="10" y="18" font-size="14" font-weight="bold">%s</text>`+"\n", esc(fmt.Sprintf("%s (%s) — %s rules", p.Model.Name, p.Model.Arch, p.Semantics)))
	fmt.Fprintf(ew, `<text x="10" y="36">%s</text>`+"\n", esc(p.Verdict()))
	y := 48
	for _, d := range shown {
		label := fmt.Sprintf("%s: weights %s, KV cache %s, compute ~%s", d.Device.Name, humanBytes(d.Weights), humanBytes(d.KV), humanBytes(d.Compute))
		if c := d.Capacity(); c > 0 {
			label += fmt.Sprintf(" — %s of %s", humanBytes(d.Total), humanBytes(c))
		}
		fmt.Fprintf(ew, `<rect x="10" y="%d" width="12" height="12" fill="%s"/><text x="28" y="%d">%s</text>`+"\n", y, col[d.Device.Name], y+10, esc(label))
		y += 16
	}
	p.svgCapacityBars(ew, col, shown, y)
	// header row
	y = top
	fmt.Fprintf(ew, `<text x="10" y="%d" font-weight="bold">layer</text>`, y)
	for i, c := range mapClasses {
		fmt.Fprintf(ew, `<text x="%d" y="%d" font-weight="bold">%s</text>`, svgLabelW+i*svgCellW, y, esc(strings.ToLower(c.title)))
	}
	fmt.Fprintf(ew, `<text x="%d" y="%d" font-weight="bold">other</text>`, svgLabelW+len(mapClasses)*svgCellW, y)
	fmt.Fprintf(ew, `<text x="%d" y="%d" font-weight="bold">KV cache</text>`, svgLabelW+(len(mapClasses)+1)*svgCellW, y)
	fmt.Fprintf(ew, `<text x="%d" y="%d" font-weight="bold">weight bytes per device</text>`+"\n", svgLabelW+cols*svgCellW+10, y)
	var maxBytes int64
	for _, l := range p.Layers {
		var sum int64
		for _, b := range l.Bytes {
			sum += b
		}
		maxBytes = max(maxBytes, sum)
	}
	for i, l := range p.Layers {
		y := top + 4 + i*svgRow
		fmt.Fprintf(ew, `<text x="10" y="%d">%s</text>`, y+svgRow-3, esc(l.Label()))
		for j, c := range mapClasses {
			title := ""
			if c.class == gguf.ClassRoutedExpert && l.Experts != nil {
				title = "experts per device: " + l.RoutedCell()
			}
			svgCell(ew, col, svgLabelW+j*svgCellW, y, l.Classes[c.class.String()], title)
		}
		var other []string
		for _, c := range []string{"embedding", "output", "other"} {
			if d := l.Classes[c]; d != "" {
				other = append(other, d)
			}
		}
		svgCell(ew, col, svgLabelW+len(mapClasses)*svgCellW, y, strings.Join(other, "+"), "")
		svgCell(ew, col, svgLabelW+(len(mapClasses)+1)*svgCellW, y, l.KVDevice, "")
		bx := svgLabelW + cols*svgCellW + 10
		for _, name := range sortedKeys(l.Bytes) {
			b := l.Bytes[name]
			wpx := int(float64(svgBarW) * float64(b) / float64(max(maxBytes, 1)))
			fmt.Fprintf(ew, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s</title></rect>`, bx, y+2, wpx, svgRow-4, col[name], esc(name+" "+humanBytes(b)))
			bx += wpx
		}
		fmt.Fprintf(ew, `<text x="%d" y="%d" fill="#555">%s</text>`+"\n", svgLabelW+cols*svgCellW+16+svgBarW, y+svgRow-3, esc(layerBytes(l.Bytes)))
	}
	fmt.Fprintln(ew, "</svg>")
	return ew.err
}

// svgCapacityBars draws each device's memory use against its capacity, from y down.
func (p *Plan) svgCapacityBars(w io.Writer, col map[string]string, devs []DeviceUse, y int) {
	for _, d := range devs {
		c := d.Capacity()
		if c <= 0 {
			continue
		}
		const barW = 400
		fmt.Fprintf(w, `<text x="10" y="%d">%s</text>`, y+9, esc(d.Device.Name))
		fmt.Fprintf(w, `<rect x="60" y="%d" width="%d" height="10" fill="none" stroke="#888"/>`, y, barW)
		x := 60.0
		for _, part := range []struct {
			name  string
			bytes int64
			alpha string
		}{{"weights", d.Weights, "1"}, {"KV cache", d.KV, "0.6"}, {"compute (estimate)", d.Compute, "0.3"}} {
			wpx := barW * float64(part.bytes) / float64(max(c, d.Total))
			fmt.Fprintf(w, `<rect x="%.1f" y="%d" width="%.1f" height="10" fill="%s" fill-opacity="%s"><title>%s</title></rect>`,
				x, y, wpx, col[d.Device.Name], part.alpha, esc(part.name+" "+humanBytes(part.bytes)))
			x += wpx
		}
		fmt.Fprintf(w, `<text x="%d" y="%d">%s</text>`+"\n", 70+barW, y+9, esc(strings.TrimSpace(deviceStatus(&d))))
		y += 16
	}
}

// svgCell fills a cell with the colour of each device named in a "CPU+CUDA0" cell; title
// is its tooltip (devs when empty).
func svgCell(w io.Writer, col map[string]string, x, y int, devs, title string) {
	if devs == "" {
		return
	}
	if title == "" {
		title = devs
	}
	names := strings.Split(devs, "+")
	wpx := float64(svgCellW-4) / float64(len(names))
	for i, n := range names {
		fill := col[n]
		if fill == "" {
			fill = "#ffffff"
		}
		fmt.Fprintf(w, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="#fff"><title>%s</title></rect>`, float64(x)+float64(i)*wpx, y, wpx, svgRow-1, fill, esc(title))
	}
	fmt.Fprintf(w, `<text x="%d" y="%d" font-size="9" fill="#000">%s</text>`, x+3, y+svgRow-4, esc(devs))
}

func esc(s string) string { return html.EscapeString(s) }

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// WriteHTML writes a self-contained page: the text summary, the coloured layer map and the
// rule table.
func (p *Plan) WriteHTML(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s — moerun place</title>\n", esc(p.Model.Name))
	fmt.Fprint(ew, "<style>body{font-family:sans-serif;margin:1.5em}pre{background:#f6f6f6;padding:1em;overflow-x:auto}"+
		"table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.warn{color:#a40000}</style></head><body>\n")
	fmt.Fprintf(ew, "<h1>%s</h1>\n<p><b>%s</b></p>\n", esc(p.Model.Name+" ("+p.Model.Arch+")"), esc(p.Verdict()))
	var summary strings.Builder
	p.writeSummary(&summary)
	p.writeDevices(&summary)
	fmt.Fprintf(ew, "<pre>%s</pre>\n<h2>Layer map</h2>\n", esc(summary.String()))
	if err := p.WriteSVG(ew); err != nil {
		return err
	}
	fmt.Fprint(ew, "<h2>Rules</h2>\n")
	var rules strings.Builder
	p.writeRules(&rules)
	p.writeNotes(&rules)
	fmt.Fprintf(ew, "<pre>%s</pre>\n</body></html>\n", esc(rules.String()))
	return ew.err
}
