/** The `--html` page's styles. */
export const STYLE = `
body{font:14px system-ui,sans-serif;margin:0;color:#222;background:#fff}
main{margin:20px 24px;max-width:1600px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 6px}h2 small{font-weight:normal;color:#666}
.sub,.help{color:#555;margin:4px 0 10px}
table.summary{border-collapse:collapse;margin:8px 0 12px;font-size:13px;font-variant-numeric:tabular-nums;display:block;overflow-x:auto}
table.summary th,table.summary td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right;white-space:nowrap}
table.summary th[scope=row],table.summary th[scope=col]:first-child{text-align:left}
table.summary thead th{background:#f4f4f4;font-weight:600}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:baseline}
.controls{display:flex;flex-wrap:wrap;gap:8px;align-items:center;padding:8px 10px;background:#f7f7f7;border:1px solid #e2e2e2;border-radius:6px;position:sticky;top:0;z-index:2}
.controls input[type=range]{width:260px;vertical-align:middle}.controls input[type=number]{width:110px}
.controls .sep{width:1px;height:20px;background:#ddd;margin:0 6px}
.warning{background:#fff4e5;border:1px solid #f0c27a;padding:6px 10px;border-radius:4px}
svg text{font:11px system-ui,sans-serif;fill:#333}
svg{display:block;user-select:none}
.plot{fill:#fff}.grid{stroke:#ececec}.axis{stroke:#777}
.band{stroke:none}.band:hover{stroke:#000;stroke-width:1}.band.rest{fill:#cfcfcf}
.series{fill:none;stroke-width:1.6;pointer-events:none}.series.held{stroke:#1f77b4}.series.in-use{stroke:#ff7f0e;stroke-width:1}.series.requested{stroke:#2ca02c;stroke-dasharray:4 2}
.overview-held{stroke-width:1.8}
.peak{stroke:#000;stroke-dasharray:2 3;pointer-events:none}.peak-label{pointer-events:none;font-weight:600}
.picked{stroke:#c00;stroke-width:1.5;pointer-events:none}
.failed{fill:#c00;pointer-events:none}
.brush{fill:rgba(31,119,180,.15);stroke:#1f77b4;pointer-events:none}
.window{fill:rgba(0,0,0,.06);stroke:#888;pointer-events:none}
.legend{color:#444}.key{display:inline-block;width:18px;height:10px;margin:0 4px 0 12px;vertical-align:middle}
.key.held{border-top:2px solid #1f77b4}.key.in-use{border-top:2px solid #ff7f0e}.key.requested{border-top:2px dashed #2ca02c}
.key.rest{background:#cfcfcf}.key.failed{background:#c00;width:8px}.key.peak{border-left:1px dashed #000;width:1px}.key.picked{border-left:2px solid #c00;width:1px}
.maps{display:flex;gap:16px;align-items:flex-start}
.map-fig{margin:0;flex:1;min-width:300px}.map-fig figcaption{font-weight:600}
.map-note{color:#555;margin:2px 0 6px;font-size:12px}
.region{fill:#f3f3f3;stroke:#999;stroke-width:.5}
.chunk.used{fill:#d62728}.chunk.used.on-stream{fill:#9467bd}.chunk.free{fill:#b7e4c7}.chunk.free.owned{fill:#f2b134}.chunk.reserve{fill:#8c8c8c}.chunk.many{fill:#e9967a}
.chunk:hover{stroke:#000;stroke-width:1}
.no-map{color:#555;max-width:60ch}
.tip{position:fixed;z-index:5;max-width:440px;background:#fff;border:1px solid #999;border-radius:4px;padding:6px 8px;font-size:12px;box-shadow:0 2px 8px rgba(0,0,0,.18);pointer-events:none}
`
